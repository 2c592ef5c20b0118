"""Real measurement in worker processes: every error kind, recovery, correctness, costs."""
from __future__ import annotations

import os

import pytest

import looptune as lt
from helpers_templates import FAULT_MODES
from looptune.errors import LooptuneError
from looptune.search import (ErrorKind, GridTuner, MeasureOption, Measurer, TuningError,
                             create_task, load_records, log_to_file, measure_configs,
                             template, worker_role)

OPT = MeasureOption(number=2, repeat=3, timeout=1.5, n_parallel=2)


@pytest.fixture(scope="module")
def faulty():
    """The faulty task, its well-behaved kernels compiled ahead (in this process, where no
    mode misbehaves), so that a loaded machine cannot push their builds past the timeout."""
    task = create_task("test_faulty", (12,))
    for mode in ("ok", "wrong"):
        for tile in (0, 1):
            s, tensors = task.instantiate(_index(task, mode, tile))
            lt.build(s, tensors, target=task.target, name=task.func_name)
    return task


def _index(task, mode, tile=0):
    return task.config_space.index_of([FAULT_MODES.index(mode), tile])


@pytest.mark.slow
def test_each_misbehaviour_is_its_error_kind_and_the_workers_recover(faulty):
    modes = ["ok", "invalid", "raise", "segv", "ok", "abort", "hang", "ok", "hang_build",
             "wrong", "ok"]
    tiles = [0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0]
    configs = [_index(faulty, m, t) for m, t in zip(modes, tiles)]
    with Measurer(faulty, OPT) as m:
        res = []
        for k in range(0, len(configs), 2):
            batch = [faulty.config_space.get(i) for i in configs[k:k + 2]]
            res.extend(m.measure(batch))
        restarts = (m._runner.restarts, m._builders.restarts)
    kinds = [r.error_kind.value for r in res]
    assert kinds == ["none", "invalid_config", "build_error", "crash", "none", "crash",
                     "timeout", "none", "build_timeout", "wrong_result", "none"]
    by = dict(zip(range(len(res)), res))
    assert "vectorize(k)" in by[1].error_msg and "ScheduleError" not in by[1].error_msg
    assert "ValueError: a bug in the template" in by[2].error_msg
    assert "SIGSEGV" in by[3].error_msg and "SIGABRT" in by[5].error_msg
    assert "longer than 1.5 s" in by[6].error_msg and by[6].run_time >= 1.5
    assert by[8].build_time >= 1.5
    assert "differs from the reference" in by[9].error_msg
    for r in res:
        assert r.ok == (r.error_kind is ErrorKind.NONE)
        if r.ok:
            assert len(r.costs) == 3 and r.cost == sorted(r.costs)[1] and r.gflops > 0
        else:
            assert r.costs == [] and r.cost == float("inf") and r.gflops is None
    assert restarts == (3, 1)            # segv, abort, hang; hang_build


@pytest.mark.slow
def test_a_tuning_run_survives_every_fault_and_never_picks_a_wrong_result(faulty, tmp_path):
    path = tmp_path / "faulty.jsonl"
    tuner = GridTuner(faulty)
    best = tuner.tune(16, OPT, callbacks=[log_to_file(path)])
    recs = load_records(path, faulty)
    trials = [r for r in recs if r.kind == "measure"]
    assert sorted(r.index for r in trials) == list(range(16))
    kinds = {FAULT_MODES[faulty.config_space.vector(r.index)[0]]: r.error_kind for r in trials}
    assert kinds == {"ok": "none", "invalid": "invalid_config", "raise": "build_error",
                     "segv": "crash", "abort": "crash", "hang": "timeout",
                     "hang_build": "build_timeout", "wrong": "wrong_result"}
    assert best.config["mode"].val == "ok"
    # races and the end of the tune time configs again: only the two correct ones qualify
    again = [r for r in recs if r.kind == "remeasure"]
    ok_configs = {_index(faulty, "ok", 0), _index(faulty, "ok", 1)}
    assert sorted(r.index for r in again[-6:]) == sorted(sorted(ok_configs) * 3)
    assert {r.index for r in again} == ok_configs and all(r.ok for r in again)
    assert len(again) == 6 + 2 * 2 * tuner.races


@pytest.mark.slow
def test_correctness_check_can_be_turned_off(faulty):
    opt = MeasureOption(number=1, repeat=1, timeout=5, n_parallel=1, check_correctness=False)
    (r,) = measure_configs(faulty, [_index(faulty, "wrong")], opt)
    assert r.ok


@pytest.mark.slow
def test_flush_cache_keeps_every_repeat(faulty):
    opt = MeasureOption(number=1, repeat=4, timeout=5, n_parallel=1, flush_cache=True)
    (r,) = measure_configs(faulty, [_index(faulty, "ok", 1)], opt)
    assert r.ok and len(r.costs) == 4


@pytest.mark.slow
def test_hopeless_candidates_are_not_timed_in_full(faulty):
    cfg = faulty.config_space.get(_index(faulty, "ok", 1))
    opt = MeasureOption(number=2, repeat=3, timeout=5, n_parallel=1, cutoff_min_ms=0)
    with Measurer(faulty, opt) as m:
        m.best_cost = 1e-12                     # nothing can come within 10x of this
        (cut,) = m.measure([cfg])
        m.best_cost = 1e3
        (full,) = m.measure([cfg])
    assert cut.ok and len(cut.costs) == 1 and "timing cut short" in cut.error_msg
    assert full.ok and len(full.costs) == 3 and full.error_msg == ""
    with pytest.raises(LooptuneError, match="slow_cutoff must be > 1"):
        MeasureOption(slow_cutoff=0.5)


@template("test_all_fail")
def _all_fail(cfg, n):
    """Valid in the tuner process; in workers every config is invalid or crashes."""
    import looptune as lt
    A = lt.placeholder((n,), "float32", name="A")
    C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
    s = lt.create_schedule(C)
    cfg.define_knob("fail", ["invalid", "crash"])
    cfg.define_split("s", C.op.axis[0], num_outputs=2)
    outer, inner = cfg["s"].apply(s, C, C.op.axis[0])
    tuning = hasattr(cfg, "index")          # a ConfigEntity (not the space being collected)
    if tuning and cfg["fail"].val == "invalid" and worker_role() == "builder":
        s[C].fuse(inner, outer)                              # not in order: ScheduleError
    if tuning and cfg["fail"].val == "crash" and worker_role() == "runner":
        os.abort()
    return s, [A, C]


@pytest.mark.slow
def test_when_every_candidate_fails_tune_raises_a_summary():
    task = create_task("test_all_fail", (8,))
    with pytest.raises(TuningError, match=r"every one of the 8 candidates .* failed: "
                       r"4 invalid_config \(e\.g\. .*not adjacent.*\); 4 crash") as ei:
        GridTuner(task).tune(10, MeasureOption(timeout=5, n_parallel=2))
    assert ei.value.kinds == {"invalid_config": 4, "crash": 4}


def test_a_template_invalid_at_its_first_choices_cannot_make_a_task():
    @template("test_invalid_first")
    def bad(cfg, n):
        import looptune as lt
        A = lt.placeholder((n,), "float32", name="A")
        C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
        s = lt.create_schedule(C)
        cfg.define_knob("v", [True])
        s[C].vectorize(C.op.axis[0])
        s[C].unroll(C.op.axis[0])
        return s, [A, C]
    with pytest.raises(LooptuneError, match="raised while its config space was collected"):
        create_task("test_invalid_first", (8,))


def test_templates_defined_in_test_modules_load_in_workers():
    # this module is imported by pytest as ``test_measure``; the workers import it by name
    task = create_task("test_all_fail", (8,))
    assert task.template.module == "test_measure"
    assert os.path.exists(task.template.file)


def test_worker_role_outside_workers():
    assert worker_role() == "main"


def test_measure_option_validation():
    with pytest.raises(Exception, match="repeat must be a positive int"):
        MeasureOption(repeat=0)
    with pytest.raises(Exception, match="timeout must be positive"):
        MeasureOption(timeout=0)
    assert MeasureOption().n_parallel == (os.cpu_count() or 1)


def test_a_template_the_workers_cannot_import_is_a_clear_error():
    def local(cfg, n):
        import looptune as lt
        A = lt.placeholder((n,), "float32", name="A")
        C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
        cfg.define_knob("x", [0, 1])
        return lt.create_schedule(C), [A, C]
    # claims a module that does not exist (a closure would be sent by value: cloudpickle)
    local.__module__, local.__qualname__ = "no_such_module_for_looptune", "local"
    template("test_local_only")(local)
    task = create_task("test_local_only", (8,))
    with pytest.raises(LooptuneError, match="template 'test_local_only' could not be loaded "
                                            "in a worker process"):
        GridTuner(task).tune(2, MeasureOption(timeout=5, n_parallel=1))
