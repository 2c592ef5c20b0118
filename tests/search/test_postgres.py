"""Distributed tuning on a real PostgreSQL server (pg_fixture.py starts one; conftest.py
imports its fixtures): workers in
separate processes, ``looptune tune --tuner optuna --storage postgresql+psycopg://...`` among
them, share one study, measure no config twice, and a worker killed with -9 loses no record
and leaves the study usable for the next one."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from test_optuna_tuner import _two_workers  # noqa: E402

from looptune.search import create_task, load_records  # noqa: E402
from looptune.search.optuna_tuner import OptunaTuner, StorageError  # noqa: E402

TS = optuna.trial.TrialState

# a small operator file for the CLI: 8 x 8 x 5 = 320 configs that build in well under a second
OPERATOR = '''
import numpy as np
import looptune as lt

NAME = "pg_matmul"
DEFAULT_ARGS = (24, 24, 24)


def algorithm(N, M, K):
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def hand_schedule(N, M, K):
    A, B, C = algorithm(N, M, K)
    return lt.create_schedule(C), [A, B, C]


@lt.template(NAME)
def template(cfg, N, M, K):
    A, B, C = algorithm(N, M, K)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=2)
    cfg.define_split("tile_j", j, num_outputs=2)
    cfg.define_knob("unroll_k", [0, 2, 4, 8, 16])
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    (k,) = s[C].op.reduce_axis
    s[C].reorder(io, jo, k, ii, ji)
    if cfg["unroll_k"].val:
        ko, ki = s[C].split(k, factor=cfg["unroll_k"].val)
        s[C].unroll(ki)
    return s, [A, B, C]


def reference(a, b):
    return a @ b
'''


def _op_file(tmp_path) -> str:
    p = tmp_path / "pg_matmul.py"
    p.write_text(OPERATOR)
    return str(p)


# ``looptune tune`` (as python -m looptune runs it) with report.py's side-by-side timing of the
# summary shortened, as tests/cli/conftest.py does in process: its 15 blocks paused 0.2 s and
# warmed up 0.1 s each, ~5 s after every worker's tune; these tests check the study, not the
# summary's figures
_LOOPTUNE = ("import sys; import looptune.report as r; "
             "r.SETTLE_S, r.WARMUP_MS, r.MIN_REPEAT_MS = 0.01, 5.0, 5.0; "
             "from looptune.cli import main; sys.exit(main())")


def _tune_cmd(op: str, url: str, log, trials: int, *extra: str) -> list[str]:
    return [sys.executable, "-c", _LOOPTUNE, "tune", op, "--tuner", "optuna", "--storage", url,
            "--study", "pg", "--trials", str(trials), "--log", str(log), "--parallel", "2",
            "--number", "1", "--repeat", "1", "--timeout", "30", "--remeasure-top", "0",
            "--noise-threshold", "0", *extra]


def _env(**kw: str) -> dict[str, str]:
    return dict(os.environ, **kw)


@pytest.fixture(scope="module")
def task16():
    return create_task("test_matmul", (16, 16, 16))


def _study(url: str, op: str):
    sys.path.insert(0, os.path.dirname(op))
    try:
        import pg_matmul  # noqa: F401  (registers the template)
    finally:
        sys.path.remove(os.path.dirname(op))
    task = create_task("pg_matmul", (24, 24, 24))
    return task, OptunaTuner(task, storage=url, study_name="pg").study


def _measured(study) -> list:
    return [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")]


def _records(log, task) -> list:
    return [r for r in load_records(log, task) if r.kind == "measure"]


# ---- one clear line for a missing driver or a server that is down ---------------------------

def _missing_driver() -> str:
    """A PostgreSQL driver that is not installed here."""
    import importlib.util
    for driver, module in (("psycopg2", "psycopg2"), ("pg8000", "pg8000")):
        if importlib.util.find_spec(module) is None:
            return driver
    pytest.skip("psycopg2 and pg8000 are both installed: no missing driver to ask for")


_PACKAGE = {"psycopg2": "psycopg2-binary", "pg8000": "pg8000"}


def test_a_missing_driver_names_the_package(task16):
    d = _missing_driver()
    with pytest.raises(StorageError, match=rf"storage 'postgresql\+{d}://u:\*\*\*@db\.example:"
                                           rf"5432/x' needs the Python package "
                                           rf"{_PACKAGE[d]} \(driver '{d}', module {d}\): pip "
                                           rf"install '{_PACKAGE[d]}'"):
        OptunaTuner(task16, storage=f"postgresql+{d}://u:secret@db.example:5432/x")


def test_a_url_without_driver_takes_an_installed_one(monkeypatch):
    from looptune.search import optuna_storage as st
    pytest.importorskip("psycopg", reason="the test extra installs psycopg[binary]")
    assert st.resolve_driver("postgresql://u@h/db").drivername == "postgresql+psycopg"
    monkeypatch.setattr(st, "_importable", lambda module: module == "psycopg2")
    assert st.resolve_driver("postgresql://u@h/db").drivername == "postgresql+psycopg2"
    monkeypatch.setattr(st, "_importable", lambda module: False)
    with pytest.raises(StorageError, match=r"storage 'postgresql://u@h/db' needs a PostgreSQL "
                                           r"driver and none is installed: pip install "
                                           r"'psycopg\[binary\]'"):
        st.resolve_driver("postgresql://u@h/db")
    with pytest.raises(StorageError, match=r"SQLAlchemy knows no database 'postgresql\+nope'; "
                                           r"use one of postgresql\+psycopg, "):
        st.resolve_driver("postgresql+nope://u@h/db")


def test_a_server_that_is_down_is_named(task16):
    pytest.importorskip("psycopg", reason="the test extra installs psycopg[binary]")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                  # closed again: nothing listens there
    with pytest.raises(StorageError, match=rf"cannot open the PostgreSQL database at "
                                           rf"127\.0\.0\.1:{port} \(storage 'postgresql\+"
                                           rf"psycopg://u@127\.0\.0\.1:{port}/x'\): .*refused"):
        OptunaTuner(task16, storage=f"postgresql+psycopg://u@127.0.0.1:{port}/x")


@pytest.mark.slow
def test_the_cli_says_it_in_one_line(tmp_path):
    d = _missing_driver()
    r = subprocess.run(_tune_cmd(_op_file(tmp_path), f"postgresql+{d}://u@h/x",
                                 tmp_path / "l.jsonl", 2),
                       capture_output=True, text=True, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("looptune tune:")]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert errors == [f"looptune tune: StorageError: storage 'postgresql+{d}://u@h/x' needs "
                      f"the Python package {_PACKAGE[d]} (driver '{d}', module {d}): pip "
                      f"install '{_PACKAGE[d]}'" + ("; or, with psycopg 3, postgresql+psycopg:"
                                                    "//..." if _has_psycopg() else "")]


def _has_psycopg() -> bool:
    import importlib.util
    return importlib.util.find_spec("psycopg") is not None


def test_without_binaries_the_fixture_skips_or_fails_as_asked(monkeypatch):
    import pg_fixture
    monkeypatch.setattr(pg_fixture.shutil, "which", lambda name: None)
    monkeypatch.setattr(pg_fixture.glob, "glob", lambda pattern: [])
    assert pg_fixture.find_bindir() is None
    monkeypatch.delenv(pg_fixture.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="install Debian's postgresql"):
        pg_fixture.pg_server.__wrapped__().__next__()
    monkeypatch.setenv(pg_fixture.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="the PostgreSQL tests must run here"):
        pg_fixture.pg_server.__wrapped__().__next__()


# ---- a real server ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_fixture_serves_a_database_on_localhost(pg_server, pg_url):
    import psycopg
    with psycopg.connect(pg_url.replace("+psycopg", "")) as conn:
        (addr,) = conn.execute("select inet_server_addr()::text").fetchone()
        assert addr.startswith("127.0.0.1")
        assert conn.execute("select current_database()").fetchone()[0] == pg_url.rsplit("/")[-1]
    with socket.socket() as s:            # nothing listens on the machine's other addresses
        s.settimeout(2)
        other = socket.gethostbyname(socket.gethostname())
        if not other.startswith("127."):
            assert s.connect_ex((other, pg_server.port)) != 0


@pytest.mark.slow
def test_two_processes_share_a_postgresql_study(pg_url, tmp_path):
    _two_workers(pg_url, tmp_path, n=10)


@pytest.mark.slow
def test_trials_in_postgresql_carry_knob_values(pg_url, fake_measure):
    task = create_task("test_matmul", (16, 16, 16))
    t = OptunaTuner(task, storage=pg_url, study_name="values", seed=0)
    fake_measure(t, lambda i: 1e-4 * (1 + i % 13))
    t.tune(6, __import__("looptune").search.MeasureOption(n_parallel=2))
    again = OptunaTuner(task, storage=pg_url, study_name="values")   # read back from the server
    for tr in _measured(again.study):
        cfg = task.config_space.get(tr.user_attrs["index"])
        assert tr.params["tile_i"] == cfg["tile_i"].size[1]
        assert again.index_of_params(tr.params) == cfg.index


def test_a_server_lost_while_tuning_is_one_clear_error(pg_server, pg_url, fake_measure):
    task = create_task("test_matmul", (16, 16, 16))
    t = OptunaTuner(task, storage=pg_url, study_name="lost", seed=0)
    fake_measure(t, lambda i: 1e-4)
    pg_server.stop()
    try:
        with pytest.raises(StorageError, match=rf"lost the study 'lost': cannot open the "
                                               rf"PostgreSQL database at 127\.0\.0\.1:"
                                               rf"{pg_server.port} .*; the log keeps every "
                                               rf"result so far \(tune again with --resume\)"):
            t.tune(4, __import__("looptune").search.MeasureOption(n_parallel=2))
    finally:
        pg_server.restart()
    assert OptunaTuner(task, storage=pg_url, study_name="lost").study.study_name == "lost"


@pytest.mark.slow
def test_two_cli_workers_share_one_study(pg_url, tmp_path):
    op = _op_file(tmp_path)
    logs = [tmp_path / f"w{k}.jsonl" for k in range(2)]
    procs = [subprocess.Popen(_tune_cmd(op, pg_url, log, 6, "--seed", "0"), env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for log in logs]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    task, study = _study(pg_url, op)
    per_log = [_records(log, task) for log in logs]
    assert [len(r) for r in per_log] == [6, 6]
    logged = [r.index for recs in per_log for r in recs]
    measured = _measured(study)
    indices = [t.user_attrs["index"] for t in measured]
    assert len(set(logged)) == 12 and sorted(indices) == sorted(logged)   # none twice
    assert len({t.user_attrs["worker"] for t in measured}) == 2
    assert not [t for t in study.trials if t.state is TS.RUNNING]
    for t in measured:                                    # params are the knob values
        cfg = task.config_space.get(t.user_attrs["index"])
        assert t.params == {"tile_i": cfg["tile_i"].size[1], "tile_j": cfg["tile_j"].size[1],
                            "unroll_k": cfg["unroll_k"].val}


def _wait_for_records(log, task, n: int, proc, timeout: float = 240.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if log.exists() and len(_records(log, task)) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the worker ended before measuring {n} configs: "
                        f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    pytest.fail(f"the worker measured fewer than {n} configs in {timeout:g} s")


def _wait_until_running(pg_url, worker: str, proc, timeout: float = 120.0) -> None:
    """Wait until ``worker`` holds a trial it has not measured yet (a batch in flight)."""
    import optuna
    end = time.monotonic() + timeout
    study = None
    while time.monotonic() < end:
        try:
            study = study or optuna.load_study(study_name="pg", storage=pg_url)
        except KeyError:                       # the worker has not created the study yet
            time.sleep(0.05)
            continue
        if any(t.state is TS.RUNNING and t.user_attrs.get("worker") == worker
               and not t.user_attrs.get("measured")
               for t in study.get_trials(deepcopy=False)):
            return
        if proc.poll() is not None:
            pytest.fail(f"the worker ended before a batch was in flight: "
                        f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    pytest.fail(f"worker {worker} had no trial in flight within {timeout:g} s")


@pytest.mark.slow
def test_a_worker_killed_with_9_loses_nothing_and_a_third_resumes(pg_url, tmp_path):
    op = _op_file(tmp_path)
    sys.path.insert(0, str(tmp_path))
    import pg_matmul  # noqa: F401
    sys.path.remove(str(tmp_path))
    task = create_task("pg_matmul", (24, 24, 24))
    env = _env(LOOPTUNE_OPTUNA_HEARTBEAT="1")            # dead after 3 s without heartbeats
    logs = {k: tmp_path / f"{k}.jsonl" for k in ("b", "c")}
    b = subprocess.Popen(_tune_cmd(op, pg_url, logs["b"], 3), env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # A is killed mid-batch; whether a trial is still unmeasured at the kill is a race (a
    # proposal answered from an earlier measurement ends at once), so a kill that caught
    # none is tried again with another worker A (each leaves the study consistent too)
    in_flight, killed = set(), []
    for attempt in range(5):
        logs[f"a{attempt}"] = tmp_path / f"a{attempt}.jsonl"
        a = subprocess.Popen(_tune_cmd(op, pg_url, logs[f"a{attempt}"], 200), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_records(logs[f"a{attempt}"], task, 3, a)
        worker_a = f"{socket.gethostname()}:{a.pid}"
        _wait_until_running(pg_url, worker_a, a)
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=30)
        killed.append((worker_a, logs[f"a{attempt}"]))
        _, study = _study(pg_url, op)
        # A's trials in flight: still running, or failed unmeasured by B's heartbeat check
        in_flight = {t.number for t in study.trials if t.user_attrs.get("worker") == worker_a
                     and not t.user_attrs.get("measured") and "duplicate_of" not in t.user_attrs}
        if in_flight:
            break
    assert in_flight, "no kill of 5 caught a worker with a trial in flight"
    assert b.wait(timeout=300) == 0, b.stderr.read()[-3000:]
    _, study = _study(pg_url, op)
    by_index = {t.user_attrs["index"]: t for t in _measured(study)}
    for worker_a, log_a in killed:                     # every logged result is in the study
        for rec in _records(log_a, task):
            t = by_index[rec.index]
            assert t.user_attrs["worker"] == worker_a
            assert t.user_attrs["cost"] == pytest.approx(rec.cost)
    time.sleep(3.5)                                         # A's heartbeats are now stale
    c = subprocess.run(_tune_cmd(op, pg_url, logs["c"], 6), env=env, capture_output=True,
                       text=True, timeout=300)
    assert c.returncode == 0, c.stderr[-3000:]
    _, study = _study(pg_url, op)
    assert not [t for t in study.trials if t.state is TS.RUNNING]
    stale = [t for t in study.trials if t.number in in_flight]
    assert all(t.state is TS.FAIL and not t.user_attrs.get("measured") for t in stale)
    logged = [r.index for log in logs.values() for r in _records(log, task)]
    assert len(logged) == len(set(logged))                 # no config measured twice
    assert len(_records(logs["c"], task)) == 6
    # every logged measurement is in the study; a killed A may have told the study a result
    # it had no time to log (told first, by design: the study loses nothing), only its own
    measured = {t.user_attrs["index"]: t for t in _measured(study)}
    assert set(logged) <= set(measured)
    unlogged = [measured[i] for i in set(measured) - set(logged)]
    assert all(t.user_attrs["worker"] in {w for w, _ in killed} for t in unlogged)
    assert len(unlogged) <= len(killed) * 2          # at most a batch (n_parallel 2) per kill
