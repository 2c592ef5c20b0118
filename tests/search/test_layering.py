"""The search package's layering, read from its source (ast): imports run one way (no cycle,
lazy imports included), nothing below the auto scheduler imports it, no module imports
another looptune module's private names, and the auto modules neither set attributes on
other objects (templates) nor read their private ones."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SEARCH = Path(__file__).resolve().parents[2] / "search"
MODULES = sorted(p.stem for p in SEARCH.glob("*.py"))


def _tree(name: str) -> ast.Module:
    return ast.parse((SEARCH / f"{name}.py").read_text(), filename=f"search/{name}.py")


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    out: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            out |= {id(m) for m in ast.walk(n)}
    return out


def _imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    skip = _type_checking_nodes(tree)
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            and id(n) not in skip]


def search_deps(name: str) -> dict[str, int]:
    """The search modules that module ``name`` imports (at any depth of its code, lazy
    imports included), each with the line of one such import; ``from . import x`` of a name
    that is no module is an import of the package face, ``__init__``."""
    out: dict[str, int] = {}
    for n in _imports(_tree(name)):
        if isinstance(n, ast.Import):
            targets = [a.name.split(".")[2] for a in n.names
                       if a.name.startswith("looptune.search.") and a.name.count(".") >= 2]
        elif n.level == 1 and n.module:
            targets = [n.module.split(".")[0]]
        elif n.level == 1:
            targets = [a.name if a.name in MODULES else "__init__" for a in n.names]
        elif n.level == 0 and (n.module or "").startswith("looptune.search"):
            parts = n.module.split(".")
            targets = [parts[2] if len(parts) > 2 else "__init__"]
        else:
            continue
        for t in targets:
            if t != name:
                out.setdefault(t, n.lineno)
    return out


def private_imports(name: str) -> list[str]:
    """``from <looptune module> import _x`` (or from a ``_private`` module) in ``name``."""
    out = []
    for n in _imports(_tree(name)):
        if not isinstance(n, ast.ImportFrom):
            continue
        if not (n.level or (n.module or "").split(".")[0] == "looptune"):
            continue                                  # another package's business
        module = "." * n.level + (n.module or "")
        parts = [p for p in (n.module or "").split(".") if p]
        for a in n.names:
            if any(p.startswith("_") and not p.startswith("__") for p in parts + [a.name]):
                out.append(f"search/{name}.py:{n.lineno}: from {module} import {a.name}")
    return out


def foreign_attributes(name: str) -> list[str]:
    """Attribute writes on anything but ``self``/``cls`` (monkey-patching), and reads of a
    ``_private`` attribute of anything but ``self``/``cls``, in module ``name``."""
    out = []
    for n in ast.walk(_tree(name)):
        if not isinstance(n, ast.Attribute):
            continue
        own = isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
        private = n.attr.startswith("_") and not n.attr.startswith("__")
        if own:
            continue
        if isinstance(n.ctx, (ast.Store, ast.Del)):
            out.append(f"search/{name}.py:{n.lineno}: sets {ast.unparse(n)}")
        elif private:
            out.append(f"search/{name}.py:{n.lineno}: reads {ast.unparse(n)}")
    return out


def _cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}          # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in graph.get(m, {}):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)) is not None:
                return found
        path.pop()
        state[m] = 2
        return None

    for m in graph:
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def _is_auto(name: str) -> bool:
    return name == "auto" or name.startswith("auto_")


def test_the_package_has_the_modules_this_test_reads():
    assert {"auto", "auto_rules", "task", "template", "tuners", "__init__"} <= set(MODULES)


def test_search_imports_run_one_way():
    graph = {m: search_deps(m) for m in MODULES if m != "__init__"}
    cycle = _cycle(graph)
    assert cycle is None, ("search modules import each other in a cycle (lazy imports "
                           "count): " + " -> ".join(cycle or []))


def test_nothing_below_the_auto_scheduler_imports_it():
    below = [m for m in MODULES if not _is_auto(m) and m != "__init__"]
    bad = [f"search/{m}.py:{line} imports {d}" for m in below
           for d, line in search_deps(m).items() if _is_auto(d) or d == "__init__"]
    assert not bad, "back-edges into the auto scheduler or the package face:\n" + "\n".join(bad)
    assert not any(_is_auto(d) for d in search_deps("task"))


def test_no_module_imports_private_names_of_another():
    bad = [line for m in MODULES for line in private_imports(m)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", [m for m in MODULES if _is_auto(m)])
def test_the_auto_modules_patch_nothing_and_read_no_private_attributes(name):
    bad = foreign_attributes(name)
    assert not bad, "\n".join(bad)


# ---- the checks themselves catch what they are for --------------------------------------

def _checked(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    for stem, text in files.items():
        (tmp_path / f"{stem}.py").write_text(text)
    monkeypatch.setitem(globals(), "SEARCH", tmp_path)
    monkeypatch.setitem(globals(), "MODULES", sorted(files))


def test_the_checks_see_a_lazy_back_edge_a_private_import_and_a_patch(tmp_path, monkeypatch):
    _checked(tmp_path, monkeypatch, {
        "task": "def f():\n    from .auto import task_from_dag\n    return task_from_dag\n",
        "auto": ("from .template import _REGISTRY, Template\nfrom .task import f\n"
                 "def g(tpl):\n    tpl.dag = 1\n    return tpl._hidden\n"),
        "template": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from .auto import g\n_REGISTRY = {}\nclass Template: ...\n",
    })
    assert search_deps("task") == {"auto": 2}
    assert search_deps("template") == {}                      # TYPE_CHECKING only
    assert _cycle({m: search_deps(m) for m in MODULES}) == ["auto", "task", "auto"]
    assert private_imports("auto") == ["search/auto.py:1: from .template import _REGISTRY"]
    assert foreign_attributes("auto") == ["search/auto.py:4: sets tpl.dag",
                                          "search/auto.py:5: reads tpl._hidden"]
