"""OptunaTuner: knob values as params, samplers and seeds, failed trials, no re-measuring, logs
for apply_history_best, resume, and workers sharing one study through a JournalStorage (a real
PostgreSQL: test_postgres.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

import looptune as lt
from looptune.errors import LooptuneError
from looptune.search import (MeasureOption, apply_history_best, create_task,
                             load_records, log_to_file)
from looptune.search.optuna_tuner import OptunaTuner, default_study_name

HERE = os.path.dirname(os.path.abspath(__file__))
OPT = MeasureOption(n_parallel=4)
TS = optuna.trial.TrialState
D = optuna.distributions


@pytest.fixture(scope="module")
def task():
    return create_task("test_matmul", (16, 16, 16))        # 3000 configs


def _cost(task, fail_every: int | None = None):
    sp = task.config_space
    target = [d - 1 for d in sp.dims]

    def cost(index):
        if fail_every and index % fail_every == 0:
            return None
        return 1e-4 * (1.0 + sum((a - b) ** 2 for a, b in zip(sp.vector(index), target)))
    return cost


def _measured(study) -> list:
    return [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")]


def test_each_knob_maps_to_a_distribution_over_its_values(task):
    t = OptunaTuner(task, seed=0)
    d = t._dists
    assert list(d) == list(task.config_space.knobs)
    # 2-way splits: the inner factor; divisors and powers of two are no even step
    assert d["tile_i"] == D.CategoricalDistribution((1, 2, 4, 8, 16)) == d["tile_j"]
    assert d["order"].choices[:2] == ("[0, 1, 2]", "[0, 2, 1]") and len(d["order"].choices) == 6
    assert d["ann"] == D.CategoricalDistribution(("['none']", "['vec']"))
    assert d["parallel"] == D.CategoricalDistribution((False, True))
    for i in (0, 1234, 2999):
        assert t.index_of_params(t.params_of(i)) == i
        cfg = task.config_space.get(i)
        assert t.params_of(i)["tile_k"] == cfg["tile_k"].size[1]
        assert t.params_of(i)["parallel"] is cfg["parallel"].val


@pytest.mark.parametrize("sampler", ["cmaes", "qmc"])
def test_numeric_only_samplers_get_ranks_and_indices(sampler, task):
    if sampler == "cmaes":
        pytest.importorskip("cmaes", reason="the test extra installs cmaes")
    t = OptunaTuner(task, sampler=sampler, seed=0)
    assert list(t._dists) == ["tile_i_rank", "tile_j_rank", "tile_k_rank", "order_index",
                              "ann_index", "parallel_index"]
    assert all(isinstance(v, D.IntDistribution) for v in t._dists.values())
    for i in (0, 1234, 2999):
        assert t.index_of_params(t.params_of(i)) == i


def _knob_template(name, values):
    from looptune.search import template

    @template(name)
    def tmpl(cfg, n):
        cfg.define_knob("k", values)
        A = lt.placeholder((n,), "float32", name="A")
        B = lt.compute((n,), lambda i: A[i] * 2.0, name="B")
        return lt.create_schedule(B), [A, B]
    return OptunaTuner(create_task(name, (8,)), seed=0)


def test_knob_values_as_params():
    t = _knob_template("test_optuna_ordered", [16, 0, 4])
    assert t._dists["k"] == D.CategoricalDistribution((0, 4, 16))      # numbers: increasing
    assert [t.index_of_params({"k": v}) for v in (0, 4, 16)] == [1, 2, 0]
    t = _knob_template("test_optuna_step", [8, 0, 16])
    assert t._dists["k"] == D.IntDistribution(0, 16, step=8)           # an even step
    assert t.params_of(0) == {"k": 8} and t.index_of_params({"k": 16}) == 2
    t = _knob_template("test_optuna_mixed", [1, True, "auto", None])
    assert t._dists["k"].choices == ("1", "true", '"auto"', "null")    # 1 == True: JSON text
    assert t.index_of_params({"k": "true"}) == 1
    t = _knob_template("test_optuna_tuples", [(1, 2), (4, 8)])
    assert t.params_of(1) == {"k": "[4, 8]"}
    with pytest.raises(LooptuneError, match=r"param k=5 is not a value of knob 'k'; its "
                                            r"values are \['\[1, 2\]', '\[4, 8\]'\]"):
        t.index_of_params({"k": 5})


def test_trials_carry_knob_values_and_enqueued_values_work(task, fake_measure):
    t = OptunaTuner(task, seed=0)
    fake_measure(t, _cost(task))
    t.tune(12, OPT)
    sp = task.config_space
    for tr in _measured(t.study):
        cfg = sp.get(tr.user_attrs["index"])
        assert tr.params == {"tile_i": cfg["tile_i"].size[1], "tile_j": cfg["tile_j"].size[1],
                             "tile_k": cfg["tile_k"].size[1], "order": str(cfg["order"]),
                             "ann": str(cfg["ann"]), "parallel": cfg["parallel"].val}
    # an enqueued config (values, as a user or the fallback enqueues it) is proposed next
    want = next(i for i in range(sp.size) if i not in t.visited)
    t.study.enqueue_trial(t.params_of(want))
    assert [c.index for c in t.next_batch(1)] == [want]


def test_a_study_with_index_params_is_refused(task, tmp_path):
    url = f"journal:{tmp_path / 'old.log'}"
    t = OptunaTuner(task, storage=url, study_name="old")
    have = dict(t.study.user_attrs["looptune_task"])
    del have["params"]                                 # as an older looptune wrote it
    t.study.set_user_attr("looptune_task", have)
    with pytest.raises(LooptuneError, match="older looptune whose trial params are knob "
                                            "indices, not values; give a new study_name"):
        OptunaTuner(task, storage=url, study_name="old")


SAMPLERS = ["tpe", "random", "nsga2", "qmc", "cmaes"]


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.slow
def test_same_seed_same_proposals_never_twice(sampler, task, fake_measure):
    if sampler == "cmaes":
        pytest.importorskip("cmaes", reason="the test extra installs cmaes")
    def run(seed):
        t = OptunaTuner(task, sampler=sampler, seed=seed)
        fm = fake_measure(t, _cost(task))
        t.tune(24, OPT)
        return fm.measured
    a = run(1)
    assert a == run(1) and len(a) == 24 and len(set(a)) == 24
    assert run(2) != a


def test_sampler_instance_and_bad_sampler(task, fake_measure):
    t = OptunaTuner(task, sampler=optuna.samplers.RandomSampler(seed=3))
    fake_measure(t, _cost(task))
    assert t.tune(8, OPT).ok
    with pytest.raises(LooptuneError, match="unknown sampler"):
        OptunaTuner(task, sampler="bayes")


def test_failed_candidates_become_failed_trials(task, fake_measure):
    t = OptunaTuner(task, seed=0)
    fake_measure(t, _cost(task, fail_every=2))
    t.tune(24, OPT)
    measured = _measured(t.study)
    failed = [tr for tr in measured if tr.state is TS.FAIL]
    assert len(measured) == 24 and failed
    assert all(tr.user_attrs["error_kind"] == "build_error" for tr in failed)
    assert all(tr.user_attrs["error_msg"] == "fake failure" for tr in failed)
    assert all(tr.user_attrs["index"] % 2 == 0 for tr in failed)
    ok = [tr for tr in measured if tr.state is TS.COMPLETE]
    assert all(tr.value == pytest.approx(tr.user_attrs["gflops"]) for tr in ok)


def _small_task():
    """16 configs, each a different program (the tuner measures every one)."""
    from looptune.search import template

    @template("test_optuna_small16")
    def small16(cfg, n):
        A = lt.placeholder((n, n), "float32", name="A")
        B = lt.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
        s = lt.create_schedule(B)
        i, j = s[B].op.axis
        cfg.define_split("tile_i", i, num_outputs=2)
        cfg.define_split("tile_j", j, num_outputs=2)
        cfg["tile_i"].apply(s, B, i)
        cfg["tile_j"].apply(s, B, j)
        return s, [A, B]
    return create_task("test_optuna_small16", (8,))


def test_duplicates_are_told_not_measured(fake_measure):
    small = _small_task()
    assert len(small.config_space) == 16
    t = OptunaTuner(small, seed=0)
    fm = fake_measure(t, lambda i: 1e-3 + i * 1e-6)
    best = t.tune(100, MeasureOption(n_parallel=2))
    assert sorted(fm.measured) == list(range(16)) and best.config.index == 0
    dups = [tr for tr in t.study.trials if "duplicate_of" in tr.user_attrs]
    assert dups                                             # TPE repeats itself on 16 configs
    by_number = {tr.number: tr for tr in t.study.trials}
    for tr in dups:
        orig = by_number.get(tr.user_attrs["duplicate_of"])
        assert orig is None or orig.user_attrs["index"] == tr.user_attrs["index"]
        if tr.state is TS.COMPLETE:
            assert tr.value == orig.value


@pytest.mark.slow
def test_real_measurement_log_works_with_apply_history_best(tmp_path):
    from helpers_templates import tmatmul
    task = create_task("test_matmul", (16, 16, 16))
    log = tmp_path / "optuna.jsonl"
    t = OptunaTuner(task, seed=0)
    best = t.tune(6, MeasureOption(n_parallel=2, number=1, repeat=1, remeasure_top=0),
                  callbacks=[log_to_file(log)])
    recs = [r for r in load_records(log, task) if r.kind == "measure"]   # not races
    assert len(recs) == 6
    assert sorted(r.index for r in recs) == sorted(tr.user_attrs["index"]
                                                   for tr in _measured(t.study))
    with apply_history_best(log) as ctx:
        s, args = tmatmul(16, 16, 16)
    assert ctx.applied[-1][1].index == best.config.index
    f = lt.build(s, args)
    a, b = (np.random.default_rng(1).random((16, 16), dtype=np.float32) for _ in range(2))
    c = np.empty((16, 16), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_resume_adds_logged_trials_to_the_study(task, fake_measure, tmp_path):
    log = tmp_path / "r.jsonl"
    t1 = OptunaTuner(task, seed=0)
    fake_measure(t1, _cost(task))
    t1.tune(8, OPT, callbacks=[log_to_file(log)])
    t2 = OptunaTuner(task, seed=0)
    fm = fake_measure(t2, _cost(task))
    t2.tune(16, OPT, callbacks=[log_to_file(log)], resume=True)
    first = {r.index for r in load_records(log, task)[:8]}
    assert len(fm.measured) == 8 and not first & set(fm.measured)
    from_log = [tr for tr in t2.study.trials if tr.user_attrs.get("source") == "log"]
    assert {tr.user_attrs["index"] for tr in from_log} == first


def test_a_study_of_another_task_is_refused(task, tmp_path):
    url = f"journal:{tmp_path / 'j.log'}"
    OptunaTuner(task, storage=url, study_name="s")
    with pytest.raises(LooptuneError, match="its own study_name"):
        OptunaTuner(create_task("test_matmul", (8, 8, 8)), storage=url, study_name="s")
    t = OptunaTuner(task, storage=url)                     # no name: named after the task
    assert t.study.study_name == default_study_name(task)


def test_seeded_worker_is_reproducible_on_a_fresh_storage(task, fake_measure, tmp_path):
    def run(path):
        t = OptunaTuner(task, storage=f"journal:{path}", seed=4, worker_id="w1")
        fm = fake_measure(t, _cost(task))
        t.tune(12, OPT)
        return fm.measured
    assert run(tmp_path / "a.log") == run(tmp_path / "b.log")


# ---- several worker processes on one storage --------------------------------------------------

WORKER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    import helpers_templates  # noqa: F401
    from looptune.search import ErrorKind, MeasureOption, MeasureResult, create_task, log_to_file
    from looptune.search.optuna_tuner import OptunaTuner

    storage, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    task = create_task("test_matmul", (16, 16, 16))

    class Fake:
        def __enter__(self): return self
        def __exit__(self, *e): return None
        def measure(self, configs):
            for c in configs:
                time.sleep(0.01)                   # let the two workers interleave
                if c.index % 3 == 0:
                    yield MeasureResult(c, [], ErrorKind.BUILD_ERROR, "fake", flop=task.flop)
                else:
                    s = 1e-4 * (1 + (c.index % 97))
                    yield MeasureResult(c, [s, s, s], flop=task.flop)

    t = OptunaTuner(task, storage=storage, study_name="shared", seed=0)
    t.make_measurer = lambda option: Fake()
    t.tune(n, MeasureOption(n_parallel=2), callbacks=[log_to_file(log)])
    print(t.worker_id)
""")


def _two_workers(storage: str, tmp_path, n: int = 20):
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(here=HERE))
    logs = [tmp_path / f"w{k}.jsonl" for k in range(2)]
    procs = [subprocess.Popen([sys.executable, str(script), storage, str(log), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for log in logs]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    task = create_task("test_matmul", (16, 16, 16))
    study = OptunaTuner(task, storage=storage, study_name="shared").study
    measured = _measured(study)
    indices = [tr.user_attrs["index"] for tr in measured]
    logged = [r.index for log in logs for r in load_records(log, task)]
    # nothing lost, nothing measured twice: 2 x n measured trials, n per worker, all distinct,
    # exactly the configs in the two logs
    assert len(measured) == 2 * n and len(set(indices)) == 2 * n
    assert sorted(indices) == sorted(logged)
    workers = {tr.user_attrs["worker"] for tr in measured}
    assert workers == {out.strip().splitlines()[-1] for out, _ in outs} and len(workers) == 2
    for w in workers:
        assert sum(tr.user_attrs["worker"] == w for tr in measured) == n
    failed = [tr for tr in measured if tr.state is TS.FAIL]
    assert failed and all(tr.user_attrs["index"] % 3 == 0 and
                          tr.user_attrs["error_kind"] == "build_error" for tr in failed)
    assert not [tr for tr in study.trials if tr.state is TS.RUNNING]


@pytest.mark.slow
def test_two_processes_share_a_journal_storage(tmp_path):
    _two_workers(f"journal:{tmp_path / 'study.journal'}", tmp_path)


def test_storage_urls_are_checked(task):
    with pytest.raises(LooptuneError, match="not a URL"):
        OptunaTuner(task, storage="study.db")
    with pytest.raises(LooptuneError, match="file path"):
        OptunaTuner(task, storage="journal:")
    assert json.dumps(OptunaTuner(task, seed=0).study.user_attrs["looptune_task"])


@pytest.mark.filterwarnings("ignore:Heartbeat of storage",
                            "ignore::optuna.exceptions.ExperimentalWarning")
def test_a_trial_abandoned_before_its_first_heartbeat_is_failed(task, tmp_path, monkeypatch):
    """A worker killed between ask() and its first heartbeat leaves a running trial optuna
    never finds stale (no heartbeat to judge). The next sync of any worker fails it once it
    is older than the grace period and has no config index (a live worker sets that at once);
    a trial of a live worker, and a new one, keep running."""
    import datetime as real
    import types
    from looptune.search import optuna_tuner as mod
    t = OptunaTuner(task, storage=f"sqlite:///{tmp_path / 's.db'}", heartbeat=1)
    abandoned = t.study.ask()                               # no heartbeat, no index
    live = t.study.ask()
    live.set_user_attr("index", 7)                          # a live worker measuring config 7
    t._sync()
    assert t.study.trials[abandoned.number].state is TS.RUNNING     # within the grace period

    class Later(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return real.datetime.now(tz) + real.timedelta(seconds=10)  # > 3 heartbeats later

    monkeypatch.setattr(mod, "datetime", types.SimpleNamespace(datetime=Later,
                                                              timedelta=real.timedelta))
    t._sync()
    states = {n: t.study.trials[n].state for n in (abandoned.number, live.number)}
    assert states == {abandoned.number: TS.FAIL, live.number: TS.RUNNING}
