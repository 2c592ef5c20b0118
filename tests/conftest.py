"""Shared pytest configuration: the --update-golden option, a per-test seeded RNG, IR
verification after every pass (LOOPTUNE_VERIFY_IR=1) and the opencl target fixture."""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

# tests/util.py is imported as ``util`` by the test modules (they live in sub-folders).
sys.path.insert(0, os.path.dirname(__file__))

# every lowering in the tests verifies its IR after each statement pass (schedule/verify.py)
os.environ.setdefault("LOOPTUNE_VERIFY_IR", "1")


FUZZ_MODULE = "tests/schedule/test_fuzz.py"


@pytest.hookimpl(optionalhook=True)    # an xdist hook: unknown without pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n`` with the default ``--dist load``: xdist's load scheduling, except that
    every test of test_fuzz.py goes to one worker. That module's module-scoped autouse
    fixture starts the whole ASan+UBSan batch (every sanitized case of the session, built
    in a private cache) on each worker that runs any of its tests, so with the module
    split over two workers both built and ran the same batch (about 40 s of a core
    each). (``xdist_group`` marks would say the same, but pytest-xdist 3.8 groups by
    renaming nodeids, which pytest 9 no longer honours.)"""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    class FuzzModuleOnOneWorker(LoadScheduling):
        fuzz: set[int] | None = None       # its tests' indices, until they are sent

        def schedule(self) -> None:
            if self.collection is None:
                collection = next(iter(self.node2collection.values()))
                self.fuzz = {i for i, nodeid in enumerate(collection)
                             if nodeid.startswith(FUZZ_MODULE + "::")}
            super().schedule()

        def _send_tests(self, node, num: int) -> None:
            chunk = self.pending[:num]
            if not self.fuzz or self.fuzz.isdisjoint(chunk):
                return super()._send_tests(node, num)
            # the first chunk holding one of them: this worker gets all of them too
            mine = sorted(set(chunk) | self.fuzz)
            self.pending[:] = [i for i in self.pending[num:] if i not in self.fuzz]
            self.fuzz = None
            self.node2pending[node].extend(mine)
            node.send_runtest_some(mine)

    return FuzzModuleOnOneWorker(config, log)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/schedule/golden/*.txt from the current lowering")


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: reproducible, different per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def opencl() -> str:
    """The target ``"opencl"``; the test is skipped, saying why, where pyopencl is missing or
    no OpenCL device can compile a kernel."""
    pytest.importorskip("pyopencl", reason="the opencl target needs pyopencl (pip install "
                        "'looptune[opencl]')")
    import looptune as lt
    from looptune.backends.opencl import select_device
    try:
        select_device(lt.Target.parse("opencl"))
    except lt.BuildError as e:
        pytest.skip(f"no usable OpenCL device: {e}")
    return "opencl"
