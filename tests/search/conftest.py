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

from helpers_measure import FakeMeasurer  # noqa: E402
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


@pytest.fixture
def fake_measure():
    """``fake_measure(tuner, cost, on_batch=None)`` makes ``tuner.tune`` use a FakeMeasurer."""
    def install(tuner, cost, on_batch=None):
        fm = FakeMeasurer(tuner.task, cost, on_batch)
        tuner.make_measurer = lambda option: fm
        return fm
    return install
