"""Fixtures for the search tests: a private build cache, the test templates, fake measuring."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)        # helpers_templates, importable here and in the workers

import helpers_templates  # noqa: E402,F401  (registers the test templates)
from pg_fixture import pg_server, pg_url  # noqa: E402,F401  (a real PostgreSQL server)

from looptune.search import MeasureResult  # noqa: E402
from looptune.search.jobs import pin_openmp_runtime  # noqa: E402

# Tests here build and drop parallel kernels in this process too; without the pin, dropping
# the last OpenMP kernel unloads libgomp under its pool threads (SIGSEGV; a core bug).
pin_openmp_runtime()


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory):
    """Every build of this session (workers included) goes to a fresh cache directory."""
    old = os.environ.get("LOOPTUNE_CACHE")
    os.environ["LOOPTUNE_CACHE"] = str(tmp_path_factory.mktemp("ltcache"))
    yield
    if old is None:
        os.environ.pop("LOOPTUNE_CACHE", None)
    else:
        os.environ["LOOPTUNE_CACHE"] = old


class FakeMeasurer:
    """Stands in for the Measurer: a deterministic cost per index, no processes.

    ``cost(index)`` returns seconds, or None for a failed (build_error) candidate; ``on_batch``
    is called before each batch (tests use it to press Ctrl-C mid-run)."""

    def __init__(self, task, cost, on_batch=None):
        self.task, self.cost, self.on_batch = task, cost, on_batch
        self.measured: list[int] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def measure(self, configs):
        from looptune.search import ErrorKind
        if self.on_batch is not None:
            self.on_batch(self)
        for c in configs:
            self.measured.append(c.index)
            sec = self.cost(c.index)
            if sec is None:
                yield MeasureResult(c, [], ErrorKind.BUILD_ERROR, "fake failure",
                                    flop=self.task.flop)
            else:
                yield MeasureResult(c, [sec, sec * 1.1, sec * 0.9], flop=self.task.flop)


@pytest.fixture
def fake_measure():
    """``fake_measure(tuner, cost, on_batch=None)`` makes ``tuner.tune`` use a FakeMeasurer."""
    def install(tuner, cost, on_batch=None):
        fm = FakeMeasurer(tuner.task, cost, on_batch)
        tuner.make_measurer = lambda option: fm
        return fm
    return install
