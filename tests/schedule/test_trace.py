"""Schedule traces: the recorded steps serialise (steps.dumps/loads), print readably and replay
on a fresh schedule of the same computation to the identical loop nest."""
from __future__ import annotations

import json

import pytest
from test_golden import CASES
from util import chain, conv2d, matmul_scaled

import looptune as lt
from looptune import ScheduleError
from looptune.schedule import steps as steps_mod
from looptune.schedule.steps import Step


def chain_mixed():
    w = chain(11, 23)
    s = w.schedule()
    D, B2, B1 = w["D"], w["B2"], w["B1"]
    s[B1].compute_inline()
    i, j = s[D].op.axis
    f = s[D].fuse(i, j)
    fo, fi = s[D].split(f, nparts=5)
    s[B2].compute_at(s[D], fo)
    s[D].parallel(fo)
    s[D].vectorize(fi)
    s[B1].compute_root()
    return w, s


def producer_at_levels():
    w = matmul_scaled(13, 17, 9)
    s = w.schedule()
    C, P = w["C"], w["P"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    ko, ki = s[C].split(k, nparts=2)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[P].compute_at(s[C], ko)
    pi, pk = s[P].op.axis
    s[P].split(pk, factor=3)
    s[C].unroll(ki)
    return w, s


def conv_pad_at():
    w = conv2d(N=1, C=2, H=9, W=11, F=3)
    s = w.schedule()
    Y = w["conv"]
    n, f, y, x = s[Y].op.axis
    yo, yi = s[Y].split(y, factor=2)
    s[w["Xpad"]].compute_at(s[Y], yo)
    return w, s


TRACES = {**CASES, "chain_mixed": chain_mixed, "producer_at_levels": producer_at_levels,
          "conv_pad_at": conv_pad_at}


def _lowered(w, s) -> str:
    return str(lt.lower(s, w.args))


@pytest.mark.parametrize("name", TRACES)
def test_trace_round_trip_on_the_same_computation(name):
    w, s = TRACES[name]()
    text = steps_mod.dumps(s.steps)
    json.loads(text)                                   # plain JSON
    loaded = steps_mod.loads(text)
    assert loaded == list(s.steps)
    fresh = lt.replay(w.schedule(), loaded)
    assert fresh.steps == s.steps
    assert _lowered(w, fresh) == _lowered(w, s)


@pytest.mark.parametrize("name", TRACES)
def test_trace_replays_on_a_rebuilt_computation(name):
    """New tensor objects with the same names (another process, a tuning log)."""
    w, s = TRACES[name]()
    loaded = steps_mod.loads(steps_mod.dumps(s.steps))
    w2, _ = TRACES[name]()
    fresh = lt.replay(w2.schedule(), loaded)
    assert _lowered(w2, fresh) == _lowered(w, s)


def test_replayed_schedule_computes_the_same_numbers():
    w, s = producer_at_levels()
    w2, _ = producer_at_levels()
    fresh = lt.replay(w2.schedule(), steps_mod.loads(steps_mod.dumps(s.steps)))
    w2.check(fresh)


def test_steps_print_readably():
    w, s = TRACES["tiled_matmul"]()
    text = [str(x) for x in s.steps]
    assert text[0] == "s[C].split('i', 8, None)"
    assert "s[C].parallel('i.outer')" in text


def test_replay_of_an_unknown_primitive():
    w, s = TRACES["tiled_matmul"]()
    with pytest.raises(ScheduleError, match=r"replay: unknown primitive 'frobnicate'"):
        lt.replay(w.schedule(), [Step("frobnicate", "C", ())])


def test_replay_of_a_step_naming_an_unknown_loop():
    w, s = TRACES["tiled_matmul"]()
    with pytest.raises(ScheduleError, match=r"stage 'C': loop: no loop named 'zz'"):
        lt.replay(w.schedule(), [Step("split", "C", ("zz", 4, None))])


def test_replay_of_a_step_naming_an_unknown_stage():
    w, s = TRACES["tiled_matmul"]()
    with pytest.raises(ScheduleError, match=r"no stage named 'Q'"):
        lt.replay(w.schedule(), [Step("compute_root", "Q", ())])
