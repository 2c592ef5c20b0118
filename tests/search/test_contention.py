"""The contention guard: other processes' CPU time while candidates are timed
(search/coreload.py, measure.py). A steady load on the other cores never makes the noise
guard's reference drift, yet it handicaps every parallel config; these tests check that it is
counted, recorded, warned about and (with busy_wait) waited out."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from looptune.errors import LooptuneError
from looptune.search import ErrorKind, MeasureOption, Measurer, MeasureResult, create_task
from looptune.search import coreload
from looptune.search import measure as measure_mod
from looptune.search.coreload import (ForeignProbe, LoadMeter, StealMeter, busy_seconds,
                                      cpu_ticks, steal_note)

LINUX = os.path.exists("/proc/stat")


def _stat(path, user, system=0, steal=0, idle=1000):
    path.write_text(f"cpu  {user} 0 {system} {idle} 7 0 0 {steal} 0 0\n"
                    f"cpu0 {user} 0 {system} {idle} 7 0 0 {steal} 0 0\nintr 1 2 3\n")


def test_busy_seconds_sums_the_busy_fields_not_idle_or_iowait(tmp_path):
    p = tmp_path / "stat"
    p.write_text("cpu  100 5 50 1000 20 1 2 3 0 0\n")
    # user + nice + system + irq + softirq + steal, in clock ticks
    assert busy_seconds(str(p)) == pytest.approx((100 + 5 + 50 + 1 + 2 + 3) / coreload._HZ)


@pytest.mark.parametrize("text", ["", "cpu 1 2\n", "intr 1 2 3 4 5 6 7 8 9\n",
                                  "cpu a b c d e f g h\n"])
def test_busy_seconds_is_none_for_what_it_cannot_read(tmp_path, text):
    p = tmp_path / "stat"
    p.write_text(text)
    assert busy_seconds(str(p)) is None
    assert busy_seconds(str(tmp_path / "missing")) is None


def test_the_steal_meter_reads_the_hypervisors_share_of_the_interval(tmp_path):
    """StealMeter: steal ticks over all ticks between its start and the reading (what
    benchmarks print beside their figures); None without a steal field or before a tick."""
    p = tmp_path / "stat"
    _stat(p, user=100, steal=10, idle=890)              # 1007 ticks, 10 stolen
    assert cpu_ticks(str(p)) == (10, 100 + 890 + 7 + 10)
    meter = StealMeter(str(p))
    assert meter.share() is None                        # no tick has passed
    _stat(p, user=150, steal=40, idle=910)              # +50 user, +30 steal, +20 idle
    assert meter.share() == pytest.approx(30 / 100)
    assert "30.0%" in steal_note(meter.share()) and "other guests" in steal_note(0.3)
    assert "other guests" not in steal_note(0.001)
    assert "not measured" in steal_note(None)
    p.write_text("cpu 1 2 3\n")
    assert cpu_ticks(str(p)) is None and StealMeter(str(p)).share() is None
    assert StealMeter(str(tmp_path / "missing")).share() is None


def test_the_probe_subtracts_this_process_cpu_time(tmp_path):
    p = tmp_path / "stat"
    _stat(p, user=1000)
    probe = ForeignProbe(str(p))
    t0 = time.process_time()
    while time.process_time() - t0 < 0.05:      # this process's own work: not foreign
        pass
    own = time.process_time() - probe.own0
    ticks = 300                                  # 3 s of CPU time in all
    _stat(p, user=1000 + ticks)
    foreign, wall = probe.stop()
    assert wall > 0
    assert foreign == pytest.approx(ticks / coreload._HZ - own, abs=0.01)


def test_the_probe_never_reports_negative_foreign_time(tmp_path):
    p = tmp_path / "stat"
    _stat(p, user=1000)
    probe = ForeignProbe(str(p))
    t0 = time.process_time()
    while time.process_time() - t0 < 0.03:      # own time, but the ticks did not move
        pass
    assert probe.stop()[0] == 0.0


def test_the_probe_is_none_without_proc_stat(tmp_path):
    assert ForeignProbe(str(tmp_path / "missing")).stop() is None


def test_the_load_meter_judges_only_a_second_or_more_and_forgets_old_samples():
    m = LoadMeter(window=1.0)
    m.add(0.1, 0.4)
    m.add(0.1, 0.4)
    assert m.cores() is None                     # 0.8 s: ticks are too coarse to judge
    m.add(0.4, 0.4)
    assert m.cores() == pytest.approx(0.6 / 1.2)
    for _ in range(5):                           # a steady full core, later
        m.add(0.4, 0.4)
    assert m.cores() == pytest.approx(1.0)       # the early quiet samples are gone


@pytest.mark.parametrize("kw", [{"busy_threshold": 0}, {"busy_threshold": -1},
                                {"busy_threshold": True}, {"busy_threshold": "1"},
                                {"busy_wait": -1}, {"busy_wait": None}, {"busy_wait": True}])
def test_measure_option_refuses_bad_contention_settings(kw):
    name = next(iter(kw))
    with pytest.raises(LooptuneError, match=f"MeasureOption: {name}"):
        MeasureOption(**kw)


# ---- the Measurer's judgement, with a scripted runner ---------------------------------------

@pytest.fixture
def task():
    return create_task("test_matmul", (16, 16, 16))


def _scripted(task, loads, **opt):
    """A Measurer whose runner reports ``loads`` (foreign seconds per 0.5 s run) in turn."""
    m = Measurer(task, MeasureOption(n_parallel=1, noise_threshold=None, **opt))
    script = iter(loads)

    def run(res, best):
        res.costs, res.error_kind = [1e-3], ErrorKind.NONE
        m.load.add(next(script), 0.5)
        return None
    m._run = run
    return m


def test_a_steady_load_is_counted_recorded_and_warned_about_once(task, caplog):
    m = _scripted(task, [0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    out = []
    with caplog.at_level(logging.WARNING, logger="looptune.search.measure"):
        for _ in range(6):
            res = MeasureResult(task.config_space.get(1))
            m._run_guarded(res, None)
            out.append(res)
    assert out[0].noise is None                  # half a second: not judged yet
    assert [r.noise["busy"] for r in out[1:]] == [0.0, 0.5, 1.0, 1.0, 1.0]
    assert (m.runs, m.busy_runs, m.busy_peak) == (6, 3, 1.0)
    warned = [r for r in caplog.records if "other processes kept" in r.getMessage()]
    assert len(warned) == 1 and "fewer threads" in warned[0].getMessage()
    assert "busy_wait" in warned[0].getMessage()


def test_busy_threshold_none_turns_the_guard_off(task, caplog):
    m = _scripted(task, [1.0] * 4, busy_threshold=None)
    with caplog.at_level(logging.WARNING, logger="looptune.search.measure"):
        for _ in range(4):
            m._run_guarded(MeasureResult(task.config_space.get(1)), None)
    assert m.busy_runs == 0 and not caplog.records


class FakeProbe:
    """Stands for ForeignProbe in measure.py: each stop() reports the next load (cores)."""
    loads: list[float] = []

    def __init__(self):
        self.t0 = time.perf_counter()

    def stop(self):
        wall = time.perf_counter() - self.t0
        return FakeProbe.loads.pop(0) * wall, wall


def test_busy_wait_waits_until_the_machine_is_quiet(task, monkeypatch):
    monkeypatch.setattr(measure_mod, "ForeignProbe", FakeProbe)
    FakeProbe.loads = [1.0, 1.0] + [0.0] * 8
    m = _scripted(task, [0.5, 0.5, 0.0], busy_wait=30)
    for _ in range(2):
        m._run_guarded(MeasureResult(task.config_space.get(1)), None)
    assert m.load.cores() == pytest.approx(1.0)  # a core busy: the next run waits
    t0 = time.monotonic()
    res = MeasureResult(task.config_space.get(1))
    m._run_guarded(res, None)
    waited = time.monotonic() - t0
    # a quarter second at a time, until the last second sampled was quiet enough
    assert 0.9 < waited < 10
    assert 4 <= 10 - len(FakeProbe.loads) <= 6
    assert res.noise["busy"] <= 0.5


def test_busy_wait_gives_up_after_its_budget_and_says_so(task, monkeypatch, caplog):
    monkeypatch.setattr(measure_mod, "ForeignProbe", FakeProbe)
    FakeProbe.loads = [1.0] * 40
    m = _scripted(task, [0.5, 0.5, 0.5], busy_wait=0.6)
    with caplog.at_level(logging.WARNING, logger="looptune.search.measure"):
        for _ in range(2):
            m._run_guarded(MeasureResult(task.config_space.get(1)), None)
        t0 = time.monotonic()
        m._run_guarded(MeasureResult(task.config_space.get(1)), None)
    assert 0.5 < time.monotonic() - t0 < 5
    msg = [r.getMessage() for r in caplog.records if "timing anyway" in r.getMessage()]
    assert len(msg) == 1 and "still keep 1.0 cores busy after waiting 0.6 s" in msg[0]


# ---- on the real machine --------------------------------------------------------------------

def _spinner(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c",
                             f"import time\nt = time.time() + {seconds}\n"
                             "while time.time() < t: pass\n"])


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="no /proc/stat: the contention guard measures nothing")
def test_a_process_spinning_on_a_core_is_measured_as_foreign_load():
    spin = _spinner(30)
    try:
        time.sleep(0.3)                           # let it start
        probe = ForeignProbe()
        time.sleep(1.5)
        foreign, wall = probe.stop()
    finally:
        spin.kill()
        spin.wait()
    assert foreign / wall > 0.7                   # a whole core (and the rest of the machine)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="no /proc/stat: the contention guard measures nothing")
def test_a_tune_beside_a_spinning_process_counts_busy_runs_and_logs_them(task, tmp_path,
                                                                         caplog):
    """Real workers: a tuner timing candidates while another process spins on a core."""
    from looptune.search import RandomTuner, load_records, log_to_file
    spin = _spinner(120)
    log = tmp_path / "t.jsonl"
    try:
        tuner = RandomTuner(task, seed=0)
        opt = MeasureOption(n_parallel=1, number=2, repeat=3, min_repeat_ms=100, timeout=30,
                            remeasure_top=0)
        # 6 trials are enough for the 4 busy runs asserted: each run times 3 repeats x 2
        # placements x >= 100 ms beside its warm-up and the noise reference (1.5-2.5 s a run
        # here), so the load meter has its second from the first run on and every run is
        # judged; the noise guard's retries only add runs. (12 trials took 45-65 s.)
        with caplog.at_level(logging.WARNING, logger="looptune.search"):
            tuner.tune(6, opt, callbacks=[log_to_file(str(log))])
    finally:
        spin.kill()
        spin.wait()
    assert tuner.busy_runs >= 4
    recs = load_records(str(log))
    busy = [r.noise["busy"] for r in recs if r.noise and "busy" in r.noise]
    assert len(busy) >= 4 and min(busy) > 0.5
    msgs = [r.getMessage() for r in caplog.records]
    assert any("other processes kept" in m for m in msgs)
    assert any(m.startswith(f"{tuner.busy_runs} of the ") and "tune again on a quiet" in m
               for m in msgs)


# ---- the command line ------------------------------------------------------------------------

def test_the_cli_passes_the_contention_settings_and_reports_busy_runs(tmp_path, monkeypatch,
                                                                      capsys):
    from pathlib import Path

    from looptune import report
    from looptune.cli import main
    from looptune.search.tuner import Tuner
    seen = {}

    def fake_tune(self, n_trial=None, measure_option=None, **kw):
        seen["opt"] = measure_option
        self.busy_runs = 3
    monkeypatch.setattr(Tuner, "tune", fake_tune)
    monkeypatch.setattr(report, "summarise_tuning", lambda *a, **k: "(summary)")
    matmul = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py")
    assert main(["tune", matmul, "--args", "16,16,16", "--tuner", "random", "--trials", "2",
                 "--log", str(tmp_path / "t.jsonl"), "--busy-threshold", "0.75",
                 "--busy-wait", "20"]) == 0
    opt = seen["opt"]
    assert (opt.busy_threshold, opt.busy_wait) == (0.75, 20.0)
    out = capsys.readouterr()
    assert "(summary)" in out.out
    assert "3 runs were timed while other processes kept more than 0.75 cores busy" in out.err
    assert main(["tune", matmul, "--args", "16,16,16", "--tuner", "random", "--trials", "2",
                 "--log", str(tmp_path / "u.jsonl"), "--busy-threshold", "0"]) == 0
    assert seen["opt"].busy_threshold is None and seen["opt"].busy_wait == 0.0
    assert seen["opt"].remeasure_fresh is True
    assert main(["tune", matmul, "--args", "16,16,16", "--tuner", "random", "--trials", "2",
                 "--log", str(tmp_path / "v.jsonl"), "--remeasure-one-process",
                 "--warmup-ms", "12.5"]) == 0
    assert seen["opt"].remeasure_fresh is False and seen["opt"].warmup_ms == 12.5
