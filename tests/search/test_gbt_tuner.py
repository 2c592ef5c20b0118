"""GBTTuner: reproducible, never re-measures, beats random search on a learnable cost, learns
through failures, transfers from other tasks' logs, and writes logs apply_history_best reads."""
from __future__ import annotations

import math

import looptune as lt
import numpy as np
import pytest
from looptune.errors import LooptuneError
from looptune.search import (
    MeasureOption,
    MeasureResult,
    RandomTuner,
    apply_history_best,
    create_task,
    load_records,
    log_to_file,
)
from looptune.search.cost_model import targets as _targets
from looptune.search.gbt_tuner import GBTTuner
from looptune.search.proposer import Proposer

OPT = MeasureOption(n_parallel=4)


@pytest.fixture(scope="module")
def task():
    return create_task("test_matmul", (16, 16, 16))        # 3000 configs


def _bowl(task, fail_every: int | None = None):
    """A smooth cost over knob indices, best at one corner; some configs fail if asked."""
    sp = task.config_space
    target = [d - 1 for d in sp.dims]

    def cost(index):
        if fail_every and index % fail_every == 0:
            return None
        v = sp.vector(index)
        return 1e-4 * (1.0 + sum((a - b) ** 2 for a, b in zip(v, target)))
    return cost


def test_targets():
    fit = np.array([2.0, 0.0, 8.0, 4.0])
    assert list(_targets(fit, "rank")) == pytest.approx([1 / 3, 0.0, 1.0, 2 / 3])
    assert list(_targets([0.0, 5.0, 0.0], "rank")) == pytest.approx([0.25, 1.0, 0.25])
    log = _targets(fit, "log")
    assert log[2] == 0.0 and log[0] == pytest.approx(np.log(2 / 8)) and log[1] < log[0]


@pytest.mark.slow
def test_same_seed_same_proposals_never_twice(task, fake_measure):
    def run(seed):
        t = GBTTuner(task, seed=seed, explore=16)
        fm = fake_measure(t, _bowl(task))
        t.tune(28, OPT)
        return fm.measured, t
    a, ta = run(5)
    b, _ = run(5)
    assert a == b and len(a) == 28 and len(set(a)) == 28
    assert run(6)[0] != a
    assert ta.model is not None                       # the model proposed the later batches


def _nest_cost(task):
    """A cost made of loop-nest properties: register tile sizes, vectorizing, parallelism
    and which loop is innermost; 2 of the 3000 configs are best."""
    sp = task.config_space

    def cost(index):
        c = sp.get(index)
        ii, ji, ki = c["tile_i"].size[1], c["tile_j"].size[1], c["tile_k"].size[1]
        pen = abs(math.log2(ji) - 3) + abs(math.log2(ii) - 2) + abs(math.log2(ki) - 1)
        pen += 3 * (c["ann"].anns[-1] != "vec") + 2 * (not c["parallel"].val)
        pen += c["order"].perm[-1] != 1
        return 1e-4 * (1.0 + pen)
    return cost


@pytest.mark.slow
def test_beats_random_search_on_a_learnable_cost(task, fake_measure):
    cost = _nest_cost(task)
    best = {}
    for cls, kw in ((RandomTuner, {}), (GBTTuner, {"explore": 16})):
        runs = []
        for seed in (0, 1):
            t = cls(task, seed=seed, **kw)
            fake_measure(t, cost)
            runs.append(t.tune(40, OPT).cost)
        best[cls.__name__] = np.mean(runs)
    assert best["GBTTuner"] < 0.75 * best["RandomTuner"]


def test_failed_candidates_are_learnt_from_not_fatal(task, fake_measure):
    t = GBTTuner(task, seed=3, objective="log", explore=12)
    fm = fake_measure(t, _bowl(task, fail_every=3))
    best = t.tune(24, OPT)
    assert len(set(fm.measured)) == 24 and best.ok
    assert any(f == 0.0 for f in t._fit.values())      # failures are in the training data


def test_configs_whose_template_raises_are_measured_not_fatal(fake_measure):
    small = create_task("test_faulty", (8,))                # 16 configs, 2 raise in-process
    t = GBTTuner(small, seed=0, n_init=4, explore=8)
    fm = fake_measure(t, lambda i: 1e-3 + i * 1e-6)
    best = t.tune(100, MeasureOption(n_parallel=2))
    assert sorted(fm.measured) == list(range(16)) and best.config.index == 0
    raising = [i for i in range(16) if small.config_space.get(i)["mode"].val == "raise"]
    assert raising and all(t.features(i) is None for i in raising)


@pytest.mark.slow
def test_plans_retrain_once_per_plan_and_hand_out_every_config_once(task, fake_measure):
    t = GBTTuner(task, seed=0, n_init=4, plan_size=8)
    fits = []
    orig = t._retrain
    t._retrain = lambda: (fits.append(len(t._fit)), orig())[1]
    fm = fake_measure(t, _bowl(task))
    t.tune(36, MeasureOption(n_parallel=2))
    assert len(fm.measured) == 36 == len(set(fm.measured))
    # plans start at trials 0, 8, 16, 24, 32; the model is retrained before each but the
    # first, on everything measured by then
    assert fits == [8, 16, 24, 32]
    assert t.model is not None


def test_diversity_trades_predicted_rank_for_knob_values_new_to_the_plan(task):
    space = task.config_space
    dims = space.dims
    same = space.index_of([0] * len(dims))
    near = space.index_of([1 if dims[0] > 1 else 0] + [0] * (len(dims) - 1))
    far = space.index_of([1 if d > 1 else 0 for d in dims])
    covered = [{0} for _ in dims]                       # the plan holds config ``same``'s values
    ranked = [same, near, far]
    assert GBTTuner(task, diversity=0.0).proposer.diverse_pick(list(ranked), covered, 8) == 0
    t = GBTTuner(task, diversity=0.5)
    assert t.proposer.diverse_pick(list(ranked), covered, 8) == 2       # every movable knob is new
    assert t.proposer.diverse_pick([same, near], covered, 8) == 1       # one new value beats 1/32 rank
    # far down the ranking (past 4 plans' worth) a config is not considered at all
    assert t.proposer.diverse_pick([same] + [near] * 31 + [far], covered, 8) == 1
    t.visited.add(far)
    assert t.proposer.diverse_pick(list(ranked), covered, 8) == 1       # measured ones are passed over


def test_bad_arguments():
    task = create_task("test_matmul", (8, 8, 8))
    with pytest.raises(LooptuneError, match="objective"):
        GBTTuner(task, objective="pairwise")
    with pytest.raises(LooptuneError, match="eps"):
        GBTTuner(task, eps=2.0)
    with pytest.raises(lt.LooptuneError, match="plan_size"):
        GBTTuner(task, plan_size=0)
    with pytest.raises(LooptuneError, match="diversity"):
        GBTTuner(task, diversity=-1.0)
    with pytest.raises(LooptuneError, match=r"transfer_slots must be one of warm, start, random; "
                                            r"got 'eps'"):
        GBTTuner(task, transfer_slots="eps")


@pytest.mark.slow
def test_transfer_warm_starts_from_another_task(task, fake_measure, tmp_path):
    other = create_task("test_matmul", (8, 16, 16))
    src = tmp_path / "other.jsonl"
    t0 = RandomTuner(other, seed=0)
    fake_measure(t0, _bowl(other))
    t0.tune(30, OPT, callbacks=[log_to_file(src)])
    t = GBTTuner(task, seed=0, transfer_logs=[src], explore=12, transfer_slots="start")
    assert t.model is not None and t.active == "transfer"     # before any measurement
    assert t.n_transferred == 30
    fm = fake_measure(t, _bowl(task))
    t.tune(28, OPT)
    assert len(set(fm.measured)) == 28
    assert set(t._models) == {"transfer", "target", "knob"}             # both kept once data exists
    assert t.active == "target" and "transfer" in t.transfer.kinds.values()


@pytest.mark.slow
def test_transfer_keeps_a_random_start_and_fades_as_data_accumulates(task, fake_measure,
                                                                     tmp_path):
    other = create_task("test_matmul", (8, 16, 16))
    src = tmp_path / "other.jsonl"
    t0 = RandomTuner(other, seed=0)
    fake_measure(t0, _bowl(other))
    t0.tune(30, OPT, callbacks=[log_to_file(src)])
    t = GBTTuner(task, seed=0, transfer_logs=[src], explore=12, eps=0.0, n_init=8,
                 transfer_slots="start", min_compare=100)    # never set aside: still fitted
    draws = []
    orig = t.proposer.random_unvisited
    t.proposer.random_unvisited = lambda *a: (draws.append(1), orig(*a))[1]
    t.next_batch(8)                       # one plan before any measurement of this task
    assert len(draws) >= 4                # every other pick is random, as without transfer
    weights = []
    fit = t._new_model
    t._new_model = lambda: _Spy(fit(), weights)
    fm = fake_measure(t, _bowl(task))
    t.tune(48, OPT)
    assert len(set(fm.measured)) == 48
    src_w = [w[:t.n_transferred].max() for w in weights if w is not None]
    assert src_w[0] == 0.5 and src_w[-1] < 0.5 * 0.5     # 0.5 x 16 / 40 at the last plan


def _source_log(tmp_path):
    other = create_task("test_matmul", (8, 16, 16))
    src = tmp_path / "other.jsonl"
    t0 = RandomTuner(other, seed=0)
    t0.make_measurer = lambda option: _fake(other, _bowl(other))
    t0.tune(30, OPT, callbacks=[log_to_file(src)])
    return src


def _fake(task, cost):
    from helpers_measure import FakeMeasurer
    return FakeMeasurer(task, cost, None)


def _spy_rankings(monkeypatch):
    """Record every ranking of a pool that any proposer makes, by scorer name ("transfer",
    "target", or "target+knob" with two-stage scoring)."""
    seen = []
    orig = Proposer.ranked_pool

    def ranked(self, score):
        out = orig(self, score)
        seen.append((score.name, list(out)))
        return out
    monkeypatch.setattr(Proposer, "ranked_pool", ranked)
    return seen


def _record_draws(t):
    """Record every random config a tuner draws."""
    draws = []
    orig = t.proposer.random_unvisited

    def drawn(*a):
        draws.append(orig(*a))
        return draws[-1]
    t.proposer.random_unvisited = drawn
    return draws


@pytest.mark.slow
def test_warm_start_is_kept_apart_from_the_search_of_this_task(task, fake_measure, tmp_path,
                                                                monkeypatch):
    """transfer_slots="warm" (the default): the first n_warm trials are the transferred
    model's best predictions; after them the search runs as without transfer (same draws,
    same model, same picks), its model never trained on the warm picks."""
    src = _source_log(tmp_path)
    sp = task.config_space

    def bowl(index):        # best at the other corner than the source task's: a search that
        return 1e-4 * (1.0 + sum(v * v for v in sp.vector(index)))   # never meets the warm picks
    base = GBTTuner(task, seed=3, explore=12, n_init=8, diversity=0.0)
    fb = fake_measure(base, bowl)
    base.tune(32, OPT)
    xt = GBTTuner(task, seed=3, explore=12, n_init=8, transfer_logs=[src], n_warm=4,
                  diversity=0.0)
    assert xt.transfer_slots == "warm" and xt.active == "transfer"
    seen = _spy_rankings(monkeypatch)
    fx = fake_measure(xt, bowl)
    xt.tune(36, OPT)
    warm = fx.measured[:4]
    names = [name for name, _ in seen]
    xfer = [r for name, r in seen if name == "transfer"]
    assert warm == xfer[-1][:4]                       # the transferred model's best ...
    assert "transfer" not in names[names.index("target+knob"):]  # ... at the start only
    assert set(xt.transfer.kinds) == set(warm) and set(xt.transfer.kinds.values()) == {"transfer"}
    assert fx.measured[4:] == fb.measured             # then the search without transfer
    assert set(xt._models) == {"target", "knob"}      # the transferred model is dropped
    _, y = xt._training_set()
    assert len(y) == 32                               # ... and the warm picks are not learnt
    # with diversity the warm picks spread over knob values the others do not have
    xd = GBTTuner(task, seed=3, explore=12, n_init=8, transfer_logs=[src], n_warm=4)
    seen = _spy_rankings(monkeypatch)
    spread = [c.index for c in xd.next_batch(4)]
    ranked = [r for name, r in seen if name == "transfer"][-1]
    assert spread[0] == ranked[0] and set(spread) <= set(ranked[:16])

    def n_values(picks):
        return sum(len({task.config_space.vector(i)[k] for i in picks})
                   for k in range(len(task.config_space.dims)))
    assert n_values(spread) >= n_values(warm)


@pytest.mark.slow
def test_transfer_replaces_only_the_random_picks(task, fake_measure, tmp_path, monkeypatch):
    src = _source_log(tmp_path)
    base = GBTTuner(task, seed=3, explore=12, n_init=8, diversity=0.0)
    xt = GBTTuner(task, seed=3, explore=12, n_init=8, transfer_logs=[src], diversity=0.0,
                  transfer_slots="start")
    b0 = [c.index for c in base.next_batch(8)]
    b1 = [c.index for c in xt.next_batch(8)]
    # the random start draws the same configs; transfer takes every other slot
    assert b1[1::2] == b0[1::2] and not set(b1[0::2]) & set(b0)
    left = [i for i in xt.proposer.pool if i not in xt.visited]
    pred = xt.scorers["transfer"](b1[0::2] + left)
    assert min(pred[:4]) >= max(pred[4:])       # the transferred model's best unmeasured
    fake_measure(xt, _bowl(task))
    xt.tune(16, OPT)
    assert set(xt._models) == {"transfer", "target", "knob"} and xt.active == "target"
    # past the random start the target model's picks are kept: eps=0 -> none replaced
    xt.eps, xt.transfer_trusted = 0.0, True
    seen = _spy_rankings(monkeypatch)
    plan = xt._make_plan(8)
    target = [r for name, r in seen if name == "target+knob"][-1]   # the last: after search
    assert plan == target[:8]
    # ... and eps=1 -> every slot random: past the start (transfer_slots="start") as drawn
    xt.eps = 1.0
    draws = _record_draws(xt)
    plan = xt._make_plan(8)
    assert plan == draws[-8:] and {xt.transfer.kinds[i] for i in plan} == {"random"}
    # ... with transfer_slots="random" every other one is the transferred model's best
    xt.transfer_slots = "random"
    seen.clear()
    plan = xt._make_plan(8)
    xfer = [r for name, r in seen if name == "transfer"][-1]
    kinds = [xt.transfer.kinds[i] for i in plan]
    assert kinds in (["transfer", "random"] * 4, ["random", "transfer"] * 4)
    assert [i for i in plan if xt.transfer.kinds[i] == "transfer"] == xfer[:4]


@pytest.mark.slow
def test_transfer_picks_must_earn_their_slots(task, fake_measure, tmp_path):
    """Transfer is set aside for good once its picks rank lower than the random picks among
    this task's measurements; the random slots are then random again."""
    src = _source_log(tmp_path)
    bowl = _bowl(task)

    def run(transfer_cost):
        xt = GBTTuner(task, seed=1, explore=12, n_init=8, transfer_logs=[src],
                      transfer_slots="start")
        fake_measure(xt, lambda i: transfer_cost if xt.transfer.kinds.get(i) == "transfer"
                     else bowl(i))
        xt.tune(16, OPT)
        assert list(xt.transfer.kinds.values())[:8] == ["transfer", "random"] * 4   # the random start
        return xt
    xt = run(1.0)                 # the transferred picks are the slowest configs of all
    assert not xt.transfer_trusted
    xt.eps = 1.0
    draws = _record_draws(xt)
    assert xt._make_plan(8) == draws[-8:]                     # every slot random again
    assert run(1e-6).transfer_trusted                         # ... the fastest: kept


class _Spy:
    """Records the sample weights a model is fitted with."""

    def __init__(self, model, log):
        self.model, self.log = model, log

    def fit(self, x, y, sample_weight=None):
        self.log.append(sample_weight)
        self.model.fit(x, y, sample_weight=sample_weight)
        return self

    def predict(self, x):
        return self.model.predict(x)


def test_transfer_ignores_records_of_the_same_task(task, fake_measure, tmp_path):
    log = tmp_path / "same.jsonl"
    t0 = RandomTuner(task, seed=0)
    fake_measure(t0, _bowl(task))
    t0.tune(8, OPT, callbacks=[log_to_file(log)])
    t = GBTTuner(task, seed=0, transfer_logs=[log])
    assert t.model is None and t.n_transferred == 0


@pytest.mark.slow
def test_real_measurement_log_works_with_apply_history_best(tmp_path):
    from helpers_templates import tmatmul
    task = create_task("test_matmul", (16, 16, 16))
    log = tmp_path / "gbt.jsonl"
    t = GBTTuner(task, seed=0, n_init=4, explore=8, plan_size=2)
    best = t.tune(8, MeasureOption(n_parallel=2, number=1, repeat=1, remeasure_top=0),
                  callbacks=[log_to_file(log)])
    recs = [r for r in load_records(log, task) if r.kind == "measure"]   # not races
    assert len(recs) == 8 and len({r.index for r in recs}) == 8
    assert t.model is not None
    with apply_history_best(log) as ctx:
        s, args = tmatmul(16, 16, 16)
    assert ctx.applied[-1][1].index == best.config.index
    f = lt.build(s, args)
    a, b = (np.random.default_rng(0).random((16, 16), dtype=np.float32) for _ in range(2))
    c = np.empty((16, 16), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


class _RacingMeasurer:
    """Every config timed at ``cost(index)`` in the search, but config ``lucky``'s search
    timing is 4x too fast: its races (re-measures) time it at its true cost."""

    def __init__(self, task, cost, lucky):
        self.task, self.cost, self.lucky = task, cost, lucky

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def _one(self, c, kind, luck=1.0):
        sec = self.cost(c.index) * luck
        return MeasureResult(c, [sec, sec, sec], flop=self.task.flop, kind=kind)

    def measure(self, configs):
        for c in configs:
            yield self._one(c, "measure", 0.25 if c.index == self.lucky else 1.0)

    def remeasure(self, configs, rounds, stop=None):
        for _ in range(rounds):
            for c in configs:
                yield self._one(c, "remeasure")


def test_the_model_learns_a_raced_config_from_its_re_measures_not_its_lucky_timing(task):
    """A config re-measured in a race is biased fast in its one search timing (it is why it
    was raced): the cost model's target for it is the median of its re-measures."""
    cost = _bowl(task)
    t = GBTTuner(task, seed=0, n_init=4, plan_size=4, explore=8)
    first = [t.space.get(i) for i in range(1, 5)]
    lucky = t.space.get(0)                # the bowl's far corner: the slowest, but lucky
    t.next_batch = lambda n, _q=[first, [lucky]]: _q.pop(0) if _q else \
        GBTTuner.next_batch(t, n)
    t.make_measurer = lambda option: _RacingMeasurer(task, cost, lucky.index)
    t.tune(5 + 4, MeasureOption(n_parallel=4, race_rounds=2))
    assert any(r.config.index == lucky.index for r in t.remeasured)        # it was raced
    true = task.flop / cost(lucky.index) / 1e9
    assert t._fit[lucky.index] == pytest.approx(true)                      # not 4x that
    assert t.best.config.index != lucky.index
