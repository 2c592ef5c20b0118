"""Schedule traces: the recorded steps serialise (steps.dumps/loads), print as runnable Python,
and replay (from JSON, or by exec of the printed text) on a fresh schedule of the same
computation to the identical loop nest."""
from __future__ import annotations

import json

import pytest
from test_golden import CASES
from util import chain, conv2d, matmul, matmul_scaled

import looptune as lt
from looptune import ScheduleError
from looptune.schedule import steps as steps_mod


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


def cached_rfactor():
    """The memory steps, whose stage names are no identifiers (A.local, C.local, C.rf)."""
    w = matmul(13, 19, 29)
    s = w.schedule()
    C, A = w["C"], w["A"]
    AL = s.cache_read(A, "local", [C])
    CL = s.cache_write(C, "local")
    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, factor=4)
    CF = s.rfactor(CL, ki)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[CL].compute_at(s[C], jo)
    s[AL].compute_at(s[C], jo)
    s[CF].compute_at(s[C], jo)
    s[C].vectorize(ji)
    return w, s


TRACES = {**CASES, "chain_mixed": chain_mixed, "producer_at_levels": producer_at_levels,
          "conv_pad_at": conv_pad_at, "cached_rfactor": cached_rfactor}


def _lowered(w, s) -> str:
    return str(lt.lower(s, w.args))


def _exec_steps(text: str, s) -> None:
    exec(text, steps_mod.namespace(s))  # noqa: S102 - the printed steps are the input


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
    assert fresh.state == s.state


@pytest.mark.parametrize("name", TRACES)
def test_trace_replays_on_a_rebuilt_computation(name):
    """New tensor objects with the same names (another process, a tuning log)."""
    w, s = TRACES[name]()
    loaded = steps_mod.loads(steps_mod.dumps(s.steps))
    w2, _ = TRACES[name]()
    fresh = lt.replay(w2.schedule(), loaded)
    assert _lowered(w2, fresh) == _lowered(w, s)


@pytest.mark.parametrize("name", TRACES)
def test_printed_steps_are_python_that_rebuilds_the_schedule(name):
    """``str(step)`` is runnable: exec'd on a fresh schedule of a rebuilt computation, the
    printed steps record the same steps and lower to the same loop nest."""
    w, s = TRACES[name]()
    text = "\n".join(str(x) for x in s.steps)
    w2, _ = TRACES[name]()
    fresh = w2.schedule()
    _exec_steps(text, fresh)
    assert fresh.steps == s.steps
    assert _lowered(w2, fresh) == _lowered(w, s)


def test_printed_steps_compute_the_same_numbers():
    w, s = cached_rfactor()
    w2, _ = cached_rfactor()
    fresh = w2.schedule()
    _exec_steps("\n".join(map(str, s.steps)), fresh)
    w2.check(fresh)


def test_replayed_schedule_computes_the_same_numbers():
    w, s = producer_at_levels()
    w2, _ = producer_at_levels()
    fresh = lt.replay(w2.schedule(), steps_mod.loads(steps_mod.dumps(s.steps)))
    w2.check(fresh)


def test_steps_print_as_python():
    w, s = TRACES["tiled_matmul"]()
    text = [str(x) for x in s.steps]
    assert text[0] == "s[C].split(s[C].loop('i'), factor=8)"
    assert "s[C].parallel(s[C].loop('i.outer'))" in text
    w, s = cached_rfactor()
    text = [str(x) for x in s.steps]
    assert text[:4] == ["s.cache_read(A, 'local', [C])", "s.cache_write(C, 'local')",
                        "s.stage('C.local').split(s.stage('C.local').loop('k'), factor=4)",
                        "s.rfactor(s.tensor('C.local'), s.stage('C.local').loop('k.inner'))"]
    assert "s.stage('A.local').compute_at(s[C], s[C].loop('j.outer'))" in text


# a tuning log's steps as written before steps were typed values (looptune 0.1, matmul
# template): [primitive, stage, [args]] with nulls for the unused split argument
OLD_LOG_STEPS = (
    '[["split", "C", ["i", 4, null]], ["split", "C", ["j", null, 3]], '
    '["split", "C", ["k", 5, null]], '
    '["reorder", "C", ["i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"]], '
    '["fuse", "C", ["i.outer", "j.outer"]], ["parallel", "C", ["i.outer.j.outer.fused"]], '
    '["unroll", "C", ["k.inner"]], ["vectorize", "C", ["j.inner"]]]')


def test_an_old_format_log_loads_replays_and_dumps_the_same():
    w = matmul(13, 19, 29)
    loaded = steps_mod.loads(OLD_LOG_STEPS)
    assert [x.primitive for x in loaded] == ["split"] * 3 + ["reorder", "fuse", "parallel",
                                                              "unroll", "vectorize"]
    assert loaded[1].args == ("j", None, 3)
    s = lt.replay(w.schedule(), loaded)
    assert steps_mod.dumps(s.steps) == OLD_LOG_STEPS      # search/log compares this text
    i, j = w["C"].op.axis
    assert [v.name for v in s[w["C"]].leaf_iter_vars] == [
        "i.outer.j.outer.fused", "k.outer", "i.inner", "k.inner", "j.inner"]
    w.check(s)


def test_old_format_memory_steps_load_and_replay():
    w = matmul(13, 19, 29)
    text = ('[["cache_read", "A", ["local", ["C"]]], ["cache_write", "C", ["local"]], '
            '["split", "C.local", ["k", 4, null]], ["rfactor", "C.local", ["k.inner"]], '
            '["bind", "C", ["i", "blockIdx.x"]], ["compute_inline", "A.local", []], '
            '["compute_root", "A.local", []], ["compute_at", "C.local", ["C", "j"]]]')
    s = lt.replay(w.schedule(), steps_mod.loads(text))
    assert steps_mod.dumps(s.steps) == text
    assert [st.name for st in s.stages] == ["A.local", "C.local.rf", "C.local", "C"]


def test_replay_of_an_unknown_primitive():
    with pytest.raises(ScheduleError, match=r"replay: unknown primitive 'frobnicate' in step "
                                            r"\['frobnicate', 'C', \[\]\]; known primitives "
                                            r"are bind, cache_read"):
        steps_mod.loads('[["frobnicate", "C", []]]')


@pytest.mark.parametrize("record, match", [
    ('[["split", "C"]]', r"a step is \[primitive, stage, \[args...\]\]; got \['split', 'C'\]"),
    ('[["split", "C", "i"]]', r"a step is \[primitive, stage"),
    ('[["split", "C", ["i", 4]]]', (r"replay: step split of 'C' takes 3 argument\(s\); got "
                                    r"\['i', 4\]")),
    ('[["compute_inline", "C", ["now"]]]', r"step compute_inline of 'C' takes 0 argument"),
    ('[["unroll", "C", []]]', r"step unroll of 'C' takes 1 argument"),
])
def test_a_malformed_step_record_is_refused(record, match):
    with pytest.raises(ScheduleError, match=match):
        steps_mod.loads(record)


def test_replay_of_a_step_naming_an_unknown_loop():
    w, s = TRACES["tiled_matmul"]()
    with pytest.raises(ScheduleError, match=r"stage 'C': loop: no loop named 'zz'"):
        lt.replay(w.schedule(), steps_mod.loads('[["split", "C", ["zz", 4, null]]]'))


def test_replay_of_a_step_naming_an_unknown_stage():
    w, s = TRACES["tiled_matmul"]()
    with pytest.raises(ScheduleError, match=r"no stage named 'Q'"):
        lt.replay(w.schedule(), steps_mod.loads('[["compute_root", "Q", []]]'))


def test_replay_of_a_refused_step_stops_there_and_keeps_what_applied():
    w = matmul(13, 19, 29)
    s = w.schedule()
    text = '[["split", "C", ["i", 4, null]], ["split", "C", ["i", 4, null]]]'
    with pytest.raises(ScheduleError, match=r"stage 'C': loop: no loop named 'i'; loops are "
                                            r"\[i.outer, i.inner, j, k\]"):
        lt.replay(s, steps_mod.loads(text))
    assert len(s.steps) == 1 and s.state == s.replayed().state
