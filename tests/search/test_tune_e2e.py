"""End to end: tuners on a small matmul, apply-best, resume after kill -9, Ctrl-C."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import looptune as lt
from helpers_templates import tmatmul
from looptune.schedule.steps import dumps
from looptune.search import (GATuner, GridTuner, MeasureOption, RandomTuner, SATuner,
                             apply_history_best, create_task, load_best, load_records,
                             log_to_file)
from looptune.search.log import rank_configs

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "helpers_tune_script.py")
N = 32


@pytest.mark.parametrize("cls", [RandomTuner, GridTuner, GATuner, SATuner])
@pytest.mark.slow
def test_tuner_log_then_apply_history_best(cls, tmp_path):
    task = create_task("test_matmul", (N, N, N))
    path = tmp_path / f"{cls.__name__}.jsonl"
    # 12 trials of 5184 configs (was 24): each tuner still proposes past its first batch (GA:
    # 3 generations of 4, as 24 gave 3 of 8), and the log, the re-measure of the top 3 and
    # apply_history_best see the same kinds of records
    kwargs = {"pop_size": 4} if cls is GATuner else {}
    tuner = cls(task, seed=3, **kwargs)
    # no races (test_races_on_real_measurements has them): the final re-measure's order exactly
    opt = MeasureOption(number=2, repeat=3, timeout=10, n_parallel=2, slow_cutoff=None,
                        race_rounds=0)
    best = tuner.tune(12, opt, callbacks=[log_to_file(path)])
    recs = load_records(path, task)
    trials = [r for r in recs if r.kind == "measure"]
    assert len(trials) == 12 and len({r.index for r in trials}) == 12
    assert all(r.error_kind == "none" and len(r.costs) == 3 for r in recs)
    assert all(r.noise is not None and r.noise["drift"] >= 0 for r in recs)  # the noise guard
    # the 3 best configs of the search, measured again in 3 interleaved rounds
    again = [r for r in recs if r.kind == "remeasure"]
    top3 = sorted(trials, key=lambda r: (r.cost, r.index))[:3]
    assert [r.index for r in again] == [i for k in range(3)
                                        for i in [t.index for t in top3][k:] +
                                        [t.index for t in top3][:k]]
    # the best is the median over a config's measurements, the same in the tuner and the log
    logged = load_best(path, task)
    assert best.kind == "remeasure" and len(best.costs) == 3      # its 3 re-measures
    assert logged.index == best.config.index and logged.cost == best.cost
    assert best.config.index in {t.index for t in top3}
    with apply_history_best(path) as ctx:
        s, tensors = tmatmul(N, N, N)
    assert [c.index for _, c in ctx.applied] == [logged.index]
    assert dumps(s.steps) == logged.steps
    f = lt.build(s, tensors)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (N, N)).astype("float32")
    b = rng.uniform(-1, 1, (N, N)).astype("float32")
    c = np.full((N, N), np.nan, dtype="float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_races_on_real_measurements(tmp_path):
    """With races on (the default), every block of re-measure records in the log between two
    trials is a race: the incumbent of the records before it (the median rule, confirmed
    configs first) timed in turns beside the configs of the batch just measured whose one
    measurement beat the incumbent's first one; what the tuner returns is what the log ranks
    first."""
    task = create_task("test_matmul", (N, N, N))
    path = tmp_path / "race.jsonl"
    opt = MeasureOption(number=2, repeat=3, timeout=10, n_parallel=1, slow_cutoff=None)
    assert opt.race_rounds == 2
    tuner = RandomTuner(task, seed=5)
    best = tuner.tune(16, opt, callbacks=[log_to_file(path)])
    recs = load_records(path, task)
    assert len([r for r in recs if r.kind == "measure"]) == 16
    assert all(r.ok for r in recs)
    final = 3 * 3                                  # the last records: the final re-measure
    blocks, start = [], None
    for n, r in enumerate(recs[:len(recs) - final]):
        if r.kind == "remeasure" and start is None:
            start = n
        elif r.kind == "measure" and start is not None:
            blocks.append((start, n))
            start = None
    if start is not None:
        blocks.append((start, len(recs) - final))
    assert len(blocks) == tuner.races >= 1
    for a, b in blocks:
        before, race = recs[:a], recs[a:b]
        assert all(r.noise is not None and r.noise.get("interleaved") for r in race)
        incumbent = rank_configs(before[:-1])[0]   # before the last batch (of one config)
        firsts = [r.cost for r in before if r.index == incumbent.index and r.kind == "measure"]
        configs = list(dict.fromkeys(r.index for r in race))
        assert configs == [incumbent.index, before[-1].index] and len(race) == 2 * 2
        assert before[-1].kind == "measure" and before[-1].cost < min(firsts)
    logged = load_best(path, task)
    assert best.kind == "remeasure" and logged.index == best.config.index
    assert logged.index == rank_configs(recs)[0].index


def _lines(path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def _workers_tagged(tag: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if tag.encode() in f.read():
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def _start(log, n_trial, tag):
    env = dict(os.environ, LOOPTUNE_TEST_TAG=tag)
    return subprocess.Popen([sys.executable, SCRIPT, str(log), str(n_trial), "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_lines(path, n, proc, limit=90.0):
    t0 = time.monotonic()
    while len(_lines(path)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < limit, "the tuning process made no progress"
        time.sleep(0.05)


@pytest.mark.slow
def test_resume_after_kill_9_loses_nothing_and_measures_nothing_twice(tmp_path, caplog):
    log = tmp_path / "killed.jsonl"
    tag = f"lt-kill-{uuid.uuid4().hex}"
    proc = _start(log, 16, tag)         # killed after 8 records, resumed to 16 (was 30)
    _wait_lines(log, 8, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    before = _lines(log)
    assert before and all(ln.endswith(b"\n") for ln in before)
    with open(log, "ab") as f:
        f.write(before[-1][:40])                   # as if killed in the middle of a write
    t0 = time.monotonic()
    while _workers_tagged(tag):                    # orphaned workers end themselves
        assert time.monotonic() - t0 < 10, "workers outlived their killed tuner"
        time.sleep(0.1)

    caplog.set_level(logging.WARNING, logger="looptune.search")
    task = create_task("test_matmul", (N, N, N))
    tuner = RandomTuner(task, seed=1)
    tuner.tune(16, MeasureOption(number=2, repeat=2, timeout=10, n_parallel=2),
               callbacks=[log_to_file(log)], resume=True)
    assert any("torn" in r.getMessage() for r in caplog.records)
    after = log.read_bytes()
    assert after.startswith(b"".join(before))     # every complete record kept, unchanged
    recs = load_records(log, task)
    trials = [r for r in recs if r.kind == "measure"]
    assert len(trials) == 16 and len({r.index for r in trials}) == 16
    assert tuner.trials == 16
    assert len(recs) == 16 + 3 * 3          # the end: the top 3 re-measured in 3 rounds


@pytest.mark.slow
def test_ctrl_c_stops_after_the_candidates_in_flight(tmp_path):
    log = tmp_path / "interrupted.jsonl"
    tag = f"lt-int-{uuid.uuid4().hex}"
    proc = _start(log, 400, tag)
    _wait_lines(log, 4, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted" in err
    words = out.split()
    assert words[0] == "BEST" and words[2] == "TRIALS"
    trials = int(words[3])
    recs = load_records(log)
    assert 4 <= len(recs) == trials < 400
    assert all(r.kind == "measure" for r in recs)          # interrupted: no re-measure
    assert int(words[1]) == min(recs, key=lambda r: r.cost).index
    assert not _workers_tagged(tag)
