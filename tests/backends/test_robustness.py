"""No raw Python exception escapes for a bad build environment or export path (issue 15): a
build cache that is a file or not writable, a function name longer than a file name may be,
an export path that cannot be written. Each is a BuildError naming what to do instead."""
from __future__ import annotations

import os

import looptune as lt
import numpy as np
import pytest


def _double(scale: float = 2.0):
    X = lt.placeholder((10,), name="X")
    Y = lt.compute((10,), lambda i: X[i] * scale, name="Y")
    return lt.create_schedule(Y), [X, Y]


def test_cache_pointing_at_a_file_is_a_build_error(tmp_path, monkeypatch):
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LOOPTUNE_CACHE", str(blocker))
    s, args = _double(scale=2.5)
    with pytest.raises(lt.BuildError, match=r"the build cache .*cache cannot be created \(File "
                       r"exists\); got LOOPTUNE_CACHE='.*cache'; set LOOPTUNE_CACHE to a "
                       "writable directory"):
        lt.build(s, args, name="twice")


def _read_only_dir(tmp_path) -> str:
    """A directory this process cannot create files in (root ignores file modes: /proc/self)."""
    if os.geteuid() == 0:
        return "/proc/self"
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    return str(d)


def test_read_only_cache_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", _read_only_dir(tmp_path))
    s, args = _double(scale=3.5)
    with pytest.raises(lt.BuildError, match=r"the build cache .* is not writable \(.*\); set "
                       "LOOPTUNE_CACHE to a writable directory"):
        lt.build(s, args, name="twice")


def test_function_name_longer_than_a_file_name_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path / "cache"))
    s, args = _double(scale=4.5)
    name = "f" * 400
    f = lt.build(s, args, name=name)
    assert f.name == name and len(f.lib_path.name) < 128
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    f(x, y)
    np.testing.assert_array_equal(y, 4.5 * x)


@pytest.mark.parametrize("where", ["header_is_a_directory", "long_name", "no_such_dir"])
def test_export_to_an_unwritable_path_is_a_build_error(where, tmp_path):
    s, args = _double(scale=5.5)
    f = lt.build(s, args, name="twice")
    if where == "header_is_a_directory":
        (tmp_path / "libd.h").mkdir()
        path = tmp_path / "libd"
    elif where == "long_name":
        path = tmp_path / ("l" * 300)
    else:
        path = "/proc/self/libx"
    with pytest.raises(lt.BuildError, match=r"export_library\('.*'\): cannot (write|create) "):
        lt.export_library(f, path)
