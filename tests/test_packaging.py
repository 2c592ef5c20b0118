"""The installed package is the whole package: pyproject's explicit package list names every
folder with an ``__init__.py``, and a wheel built from the checkout imports every module.

Before this check, ``looptune.schedule.passes`` and ``looptune.graph.fusion`` were missing from
the list: the editable install (which maps the ``looptune`` folder as a whole) hid it, and a
plain ``pip install .`` gave a package whose ``import looptune`` failed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {"tests", "examples", "benchmarks", "build", "dist", ".venv", "venv", ".git"}


def _package_folders() -> set[str]:
    """Dotted names of every folder of the checkout that holds an __init__.py."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith((".", "__"))
                       and not d.endswith(".egg-info")]
        if "__init__.py" in filenames:
            found.add(".".join(("looptune",) + rel.parts))
    return found


def _declared() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["packages"]


def test_pyproject_lists_every_package_folder():
    declared = set(_declared())
    on_disk = _package_folders()
    assert on_disk - declared == set(), "folders with __init__.py missing from pyproject"
    assert declared - on_disk == set(), "pyproject names packages that are not folders"


@pytest.mark.slow
def test_wheel_holds_every_module(tmp_path):
    """Builds the wheel as ``pip install .`` would and imports every module from it, away
    from the checkout."""
    # from a copy: setuptools builds in the tree, and a stale build/lib would fill the wheel
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.egg-info",
                                                             "__pycache__"))
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(src)], check=True, cwd=tmp_path, capture_output=True)
    (wheel,) = out.glob("looptune-*.whl")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
        in_wheel = {n[:-3].replace("/", ".").removesuffix(".__init__") for n in z.namelist()
                    if n.endswith(".py")}
    modules = sorted(m for m in in_wheel
                     if not m.split(".")[-1].startswith(("_bench", "__main__")))
    # the checkout's editable install adds a finder that would fill in what the wheel lacks
    code = ("import importlib, sys\n"
            "sys.meta_path = [f for f in sys.meta_path\n"
            "                 if '__editable__' not in getattr(f, '__module__', '')]\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "import looptune\n"
            "assert looptune.__file__.startswith(sys.argv[1]), looptune.__file__\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site")], env=env,
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # every module of the checkout's package folders is in the wheel
    for pkg in _package_folders():
        folder = ROOT.joinpath(*pkg.split(".")[1:])
        for f in folder.glob("*.py"):
            name = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            assert name in in_wheel, f"{name} is missing from the wheel"
