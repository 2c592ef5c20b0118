"""The package's floors: lang <- schedule <- backends <- search <- graph (and the CLI modules
at the root above them). No import, lazy ones included, runs back up a floor: a module may
import its own floor and the ones below it only."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"errors": -1, "lang": 0, "schedule": 1, "backends": 2, "search": 3, "graph": 4}


def _target(path: Path, node: ast.ImportFrom) -> str | None:
    """The top-level package of the looptune module an import names (None: outside)."""
    if node.level == 0:
        parts = (node.module or "").split(".")
        return parts[1] if parts[0] == "looptune" and len(parts) > 1 else None
    here = list(path.relative_to(ROOT).parent.parts)
    base = here[:len(here) - (node.level - 1)]
    names = base + (node.module.split(".") if node.module else [])
    return names[0] if names else None


@functools.cache
def _violations() -> tuple[str, ...]:
    out = []
    paths = [p for pkg in FLOORS if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py")]
    for path in sorted(paths):
        rel = path.relative_to(ROOT)
        floor = FLOORS[rel.parts[0]]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                tgt = _target(path, node)
                if tgt in FLOORS and FLOORS[tgt] > floor:
                    out.append(f"{rel}:{node.lineno} imports {tgt} (a floor above "
                               f"{rel.parts[0]})")
    return tuple(out)


@pytest.mark.parametrize("floor", [f for f in FLOORS if f != "errors"])
def test_no_import_runs_up_a_floor(floor):
    bad = [v for v in _violations() if v.startswith(floor + "/")]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_lazy_upward_import():
    node = ast.parse("def f():\n    from ..graph.export import export_model\n").body[0].body[0]
    assert _target(ROOT / "backends" / "export.py", node) == "graph"
    node = ast.parse("from looptune.search import hosts").body[0]
    assert _target(ROOT / "backends" / "x.py", node) == "search"
    node = ast.parse("from . import march").body[0]
    assert _target(ROOT / "backends" / "export.py", node) == "backends"


def test_no_module_imports_another_packages_private_names():
    """A name with a leading underscore stays inside its package (search/'s own rule, that
    no module imports another's private names, is tests/search/test_layering.py)."""
    bad = []
    for pkg in (p for p in FLOORS if (ROOT / p).is_dir()):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or _target(path, node) in (None, pkg):
                    continue
                private = [a.name for a in node.names if a.name.startswith("_")
                           and not a.name.startswith("__")]
                if private:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {private}")
    assert not bad, "\n".join(bad)
