"""The random schedule generator of the fuzzer.

A case is fully determined by its seed: the seed picks the operator, its (odd) sizes and a
sequence of 3-10 primitive calls with random stages, loops and factors. About one call in eight
is a deliberately bad choice (a loop of another stage, a loop split away already, a zero
factor, fusing loops that are not adjacent, attaching to a stage that does not read this one,
inlining a reduction, ...); many random choices are invalid anyway.

Policy for invalid steps: a primitive that raises ``ScheduleError`` is counted as *refused*
and the generator goes on with the next step on the unchanged schedule; any other exception is
a looptune bug and ends the case. If ``lower`` refuses the finished schedule (a
``ScheduleError`` there: e.g. a stage attached to a loop that was split afterwards), the whole
case counts as refused and is not built. Every case that lowers is also checked to replay:
its steps, through JSON and as their printed Python (``str(step)`` run with ``exec``), on a
fresh schedule give the same stages (``s.state``) and the identical loop nest.

``python tests/schedule/fuzz_gen.py SEED [SEED...]`` prints a case (steps, loop nest) and
builds and runs it, which is the quickest way to look at a failing seed.
"""
from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import looptune as lt
from looptune.lang.expr import Const, IterKind
from looptune.schedule import Attach
from looptune.schedule import steps as steps_mod

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_ops import OP_NAMES, FuzzOp, draw_params, make_op, run_and_compare

SANITIZE_EVERY = 8        # case index % 8 == 3: built with ASan+UBSan in a subprocess
BAD_CHOICE = 0.12         # probability that a step is deliberately invalid
MAX_UNROLL_EXTENT = 16    # unroll only loops this short (bad choices excepted)
FACTORS = (1, 2, 3, 4, 5, 7, 8, 16)


class Bug(Exception):
    """Raised for a looptune bug found while generating (a non-ScheduleError, a replay
    mismatch); the message has the details."""


@dataclass
class Case:
    """One fuzz case: what was tried and what came of it."""

    seed: int
    op_name: str
    params: dict
    sanitize: bool
    op: FuzzOp | None = None
    s: lt.Schedule | None = None
    attempts: list[str] = field(default_factory=list)   # every primitive call tried
    refused_steps: int = 0
    lowered: str | None = None           # str(lt.lower(...)); None when lowering refused
    lower_refusal: str | None = None     # the ScheduleError message of a refused lowering
    bug: str | None = None               # an unexpected exception or a replay mismatch

    @property
    def steps(self) -> list[str]:
        return [str(x) for x in self.s.steps] if self.s is not None else []

    @property
    def steps_json(self) -> str:
        return steps_mod.dumps(self.s.steps)

    def describe(self) -> str:
        """Everything needed to reproduce and understand the case."""
        head = (f"fuzz case seed={self.seed} op={self.op_name} params={self.params} "
                f"sanitize={self.sanitize}")
        lines = [head,
                 f"reproduce: python tests/schedule/fuzz_gen.py {self.seed}",
                 "attempted primitive calls (REFUSED = raised ScheduleError):",
                 *(f"  {a}" for a in self.attempts),
                 "applied steps (s.steps):", *(f"  {x}" for x in self.steps)]
        if self.lower_refusal:
            lines.append(f"lowering refused: {self.lower_refusal}")
        if self.lowered:
            lines += ["lowered:", self.lowered]
        return "\n".join(lines)


# ---- choosing stages and loops --------------------------------------------------------------

def _choice(rng, seq):
    seq = list(seq)
    return seq[int(rng.integers(len(seq)))] if seq else None


def _const(extent) -> int | None:
    return extent.value if isinstance(extent, Const) else None


def _live_stages(s):
    return [st for st in s.stages if st.attach is not Attach.INLINE] or list(s.stages)


def _any_loop(s, rng):
    """A loop of some stage, possibly one split or fused away (for bad choices)."""
    st = _choice(rng, s.stages)
    return _choice(rng, st.all_iter_vars)


def _loop(s, st, rng, bad: bool, prefer=None):
    """A leaf loop of ``st`` (from ``prefer`` when given and non-empty); with ``bad`` a loop
    of another stage or one that is no longer a leaf."""
    if bad:
        stale = [v for v in st.all_iter_vars if v not in st.leaf_iter_vars]
        if stale and rng.random() < 0.5:
            return _choice(rng, stale)
        return _any_loop(s, rng)
    return _choice(rng, prefer or st.leaf_iter_vars)


def _readers(s, st):
    """Stages that read ``st`` once inlining is done (what compute_at may attach to)."""
    out, stack, seen = [], [st], set()
    while stack:
        cur = stack.pop()
        for r in s.readers(cur):
            if id(r) in seen:
                continue
            seen.add(id(r))
            (stack if r.attach is Attach.INLINE else out).append(r)
    return out


def _tensor_readers(s, t):
    return [st for st in s.stages if any(x is t for x in st.op.inputs)]


def _placeholders(s):
    seen = {}
    for st in s.stages:
        for t in st.op.inputs:
            if not s.has_stage(t):
                seen[id(t)] = t
    return list(seen.values())


# ---- the primitives, each with its random (sometimes bad) arguments --------------------------

def _split(s, st, rng, bad):
    loop = _loop(s, st, rng, bad)
    ext = _const(getattr(loop, "extent", None)) or 8
    kw = {"nparts" if rng.random() < 0.3 else "factor":
          int(_choice(rng, FACTORS + (ext, ext + 3)))}
    if bad and rng.random() < 0.5:
        kw = _choice(rng, [{"factor": 0}, {"nparts": -2}, {"factor": 2, "nparts": 2}, {}])
    return f"s[{st.name}].split({getattr(loop, 'name', loop)}, {kw})", \
        lambda: st.split(loop, **kw)


def _tile(s, st, rng, bad):
    leaves = st.leaf_iter_vars
    k = int(rng.integers(len(leaves)))
    x = leaves[k]
    others = [v for v in leaves if v is not x]
    y = leaves[k + 1] if k + 1 < len(leaves) and rng.random() < 0.7 else _choice(rng, others)
    if bad or y is None:
        y = x if rng.random() < 0.3 else _loop(s, st, rng, True)
    fx, fy = int(_choice(rng, FACTORS)), int(_choice(rng, FACTORS))
    return f"s[{st.name}].tile({x.name}, {getattr(y, 'name', y)}, {fx}, {fy})", \
        lambda: st.tile(x, y, fx, fy)


def _fuse(s, st, rng, bad):
    leaves = st.leaf_iter_vars
    if len(leaves) < 2:
        return None
    k = int(rng.integers(len(leaves) - 1))
    n = 3 if rng.random() < 0.2 and k + 2 < len(leaves) else 2
    loops = leaves[k:k + n]
    if bad:
        loops = _choice(rng, [loops[::-1], [leaves[0], leaves[-1]], [loops[0], _any_loop(s, rng)]])
    names = ", ".join(getattr(v, "name", "?") for v in loops)
    return f"s[{st.name}].fuse({names})", lambda: st.fuse(*loops)


def _reorder(s, st, rng, bad):
    leaves = list(st.leaf_iter_vars)
    n = int(rng.integers(2, len(leaves) + 1)) if len(leaves) >= 2 else 1
    loops = [leaves[int(i)] for i in rng.permutation(len(leaves))[:n]]
    if bad:
        loops = loops + [_choice(rng, [loops[0], _any_loop(s, rng)])]
    names = ", ".join(getattr(v, "name", "?") for v in loops)
    return f"s[{st.name}].reorder({names})", lambda: st.reorder(*loops)


def _annotate(kind):
    def pick(s, st, rng, bad):
        leaves = st.leaf_iter_vars
        if kind == "unroll":
            prefer = [v for v in leaves if (_const(v.extent) or 99) <= MAX_UNROLL_EXTENT]
        elif kind in ("vectorize", "stream"):
            prefer = leaves[-1:] if rng.random() < 0.7 else None
        else:
            spatial = [v for v in leaves if v.kind is IterKind.SPATIAL]
            prefer = spatial[:1] if rng.random() < 0.6 else None
        if kind == "unroll" and not prefer and not bad:
            return None
        loop = _loop(s, st, rng, bad, prefer)
        return f"s[{st.name}].{kind}({getattr(loop, 'name', loop)})", \
            lambda: getattr(st, kind)(loop)
    return pick


def _compute_at(s, st, rng, bad):
    hosts = _readers(s, st)
    if bad or not hosts:
        hosts = [h for h in s.stages if h not in hosts] or list(s.stages)
    host = _choice(rng, hosts)
    loop = _loop(s, host, rng, bad and rng.random() < 0.3)
    return f"s[{st.name}].compute_at(s[{host.name}], {getattr(loop, 'name', loop)})", \
        lambda: st.compute_at(host, loop)


def _store_at(s, st, rng, bad):
    """For a stage computed at a host's loop: the host's loop at or outside it, where its
    buffer is kept and slid (bad: any stage's loop; see also _slide)."""
    attach = st.attach
    if bad or not hasattr(attach, "loop") or attach.loop not in attach.stage.leaf_iter_vars:
        if not bad:
            return None
        host = _choice(rng, list(s.stages))
        loop = _loop(s, host, rng, rng.random() < 0.3)
    else:
        leaves = attach.stage.leaf_iter_vars
        host, loop = attach.stage, _choice(rng, leaves[:leaves.index(attach.loop) + 1])
    return f"s[{st.name}].store_at(s[{host.name}], {getattr(loop, 'name', loop)})", \
        lambda: st.store_at(host, loop)


def _compute_with(s, st, rng, bad):
    """Fuse ``st`` into a stage computed at the same place, at one of its outer loops (most
    picks are refused at lowering: unequal extents, or reads of what the host has not yet
    computed; the rest are the legal fusions, checked against numpy like every case)."""
    order = {x: k for k, x in enumerate(s.stages)}
    hosts = [h for h in _live_stages(s) if h is not st and str(h.attach) == str(st.attach)
             and order[h] < order[st] and not s._reads_transitively(h, st)]
    if not hosts and not bad:
        return None                    # nothing computed at the same place to fuse with
    host = _choice(rng, hosts if hosts and not bad else list(s.stages))
    leaves = host.leaf_iter_vars
    prefer = leaves[:int(rng.integers(1, 3))] if leaves and rng.random() < 0.7 else None
    loop = _loop(s, host, rng, bad and rng.random() < 0.3, prefer)
    return f"s[{st.name}].compute_with(s[{host.name}], {getattr(loop, 'name', loop)})", \
        lambda: st.compute_with(host, loop)


def _compute_inline(s, st, rng, bad):
    return f"s[{st.name}].compute_inline()", st.compute_inline


def _compute_root(s, st, rng, bad):
    return f"s[{st.name}].compute_root()", st.compute_root


def _prefetch(s, st, rng, bad):
    """A tensor the stage reads, at one of its loops, some iterations ahead, clamped or not
    (bad: its own output, a tensor it does not read, a stale loop, offset 0/-1 or an unknown
    bound)."""
    reads = list(st.op.inputs)
    t = _choice(rng, reads) if reads else st.tensor
    if bad and rng.random() < 0.5:
        t = _choice(rng, [st.tensor, *(x.tensor for x in s.stages)])
    loop = _loop(s, st, rng, bad and rng.random() < 0.5)
    offset = int(_choice(rng, (0, -1))) if bad and rng.random() < 0.3 else \
        int(_choice(rng, (1, 2, 3, 8, 16)))
    along = _along(s, st, rng, bad)
    # clamped into the buffer, or as it is (past the buffer's end: never a fault); bad: a typo
    bound = _choice(rng, ("clamp", "nonfaulting", *(("non_faulting",) if bad else ())))
    text = f"s[{st.name}].prefetch({t.name}, {getattr(loop, 'name', loop)}, {offset}"
    if along is not None:    # the same iteration of `loop`, `offset` iterations of `along` ahead
        text += f", along={along.name}"
    return f"{text}, bound={bound!r})", \
        lambda: st.prefetch(t, loop, offset, along=along, bound=bound)


def _along(s, st, rng, bad):
    """None for a stage computed at root; for one computed at another's loop, mostly a loop
    of that host that encloses the attach point (bad: any loop of any stage)."""
    if bad and rng.random() < 0.2:
        return _choice(rng, [v for x in s.stages for v in x.leaf_iter_vars])
    attach = st.attach
    if not hasattr(attach, "loop") or rng.random() < 0.15:
        return None
    host, leaves = attach.stage, attach.stage.leaf_iter_vars
    if attach.loop not in leaves:          # split after compute_at: any loop (refused)
        return _choice(rng, leaves)
    return _choice(rng, leaves[:leaves.index(attach.loop) + 1])


LOOP_PRIMITIVES = {  # name -> (weight, picker(s, stage, rng, bad) -> (text, thunk) | None)
    "split": (3.0, _split), "tile": (2.0, _tile), "fuse": (2.0, _fuse),
    "reorder": (2.0, _reorder), "unroll": (1.0, _annotate("unroll")),
    "vectorize": (1.5, _annotate("vectorize")), "parallel": (1.0, _annotate("parallel")),
    "stream": (0.8, _annotate("stream")), "prefetch": (0.8, _prefetch),
    "compute_at": (3.0, _compute_at), "compute_inline": (1.5, _compute_inline),
    "compute_root": (0.3, _compute_root), "compute_with": (1.0, _compute_with),
    "store_at": (0.8, _store_at),
}


# ---- cache_write / cache_read / rfactor: a primitive and the calls that usually follow it ----

REFUSED = object()


def _cache_write(r, s, rng, bad):
    fresh = [st for st in _live_stages(s) if not st.is_scheduled and st.attach is Attach.ROOT]
    st = _choice(rng, s.stages if bad or not fresh else fresh)
    tc = r.attempt(f"{st.name}_c = s.cache_write({st.name}, 'local')",
                   lambda: s.cache_write(st.tensor, "local"))
    if tc is REFUSED or rng.random() < 0.3:
        return
    if rng.random() < 0.5:
        r.attempt(*_choice(rng, [_tile, _split])(s, st, rng, False))
    loop = _choice(rng, st.leaf_iter_vars)
    cst = s[tc]
    r.attempt(f"s[{cst.name}].compute_at(s[{st.name}], {loop.name})",
              lambda: cst.compute_at(st, loop))


def _cache_read(r, s, rng, bad):
    tensors = [t for t in _placeholders(s) + [st.tensor for st in s.stages]
               if _tensor_readers(s, t)]
    t = _choice(rng, tensors)
    readers = _tensor_readers(s, t)
    chosen = [_choice(rng, readers)] if rng.random() < 0.7 else readers
    if bad:
        chosen = chosen + [_choice(rng, s.stages)]
    names = ", ".join(x.name for x in chosen)
    tr = r.attempt(f"{t.name}_r = s.cache_read({t.name}, 'local', [{names}])",
                   lambda: s.cache_read(t, "local", [x.tensor for x in chosen]))
    if tr is REFUSED or rng.random() < 0.3:
        return
    host, cst = chosen[0], s[tr]
    loop = _choice(rng, host.leaf_iter_vars)
    r.attempt(f"s[{cst.name}].compute_at(s[{host.name}], {loop.name})",
              lambda: cst.compute_at(host, loop))


def _rfactor(r, s, rng, bad):
    reds = [st for st in s.stages if st.op.is_reduction]
    if not reds:
        return False
    st = _choice(rng, s.stages if bad else reds)
    rleaves = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE]
    if rleaves and (len(rleaves) < 2 or rng.random() < 0.3):
        loop = _choice(rng, rleaves)
        f = int(_choice(rng, FACTORS[1:]))
        r.attempt(f"s[{st.name}].split({loop.name}, factor={f})",
                  lambda: st.split(loop, factor=f))
        rleaves = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE]
    loop = _loop(s, st, rng, bad, rleaves)
    tf = r.attempt(f"{st.name}_rf = s.rfactor({st.name}, {getattr(loop, 'name', loop)})",
                   lambda: s.rfactor(st.tensor, loop))
    if tf is REFUSED or rng.random() < 0.4:
        return True
    fst = s[tf]
    if rng.random() < 0.5:
        kind = _choice(rng, ["vectorize", "parallel", "unroll"])
        lp = fst.leaf_iter_vars[0]
        r.attempt(f"s[{fst.name}].{kind}({lp.name})", lambda: getattr(fst, kind)(lp))
    else:
        lp = _choice(rng, st.leaf_iter_vars)
        r.attempt(f"s[{fst.name}].compute_at(s[{st.name}], {lp.name})",
                  lambda: fst.compute_at(st, lp))
    return True


def _slide(r, s, rng, bad):
    """A sliding window: a stage computed at an inner loop of a reader (split first, half
    the time) and stored at a loop outside it."""
    st = _choice(rng, [x for x in _live_stages(s) if _readers(s, x)] or list(s.stages))
    hosts = _readers(s, st)
    if not hosts:
        return
    host = _choice(rng, hosts)
    if rng.random() < 0.5:
        r.attempt(*_split(s, host, rng, False))
    leaves = host.leaf_iter_vars
    if len(leaves) < 2:
        return
    k = int(rng.integers(1, len(leaves)))
    c, loop = leaves[k], leaves[int(rng.integers(0, k))]
    if r.attempt(f"s[{st.name}].compute_at(s[{host.name}], {c.name})",
                 lambda: st.compute_at(host, c)) is REFUSED:
        return
    r.attempt(f"s[{st.name}].store_at(s[{host.name}], {loop.name})",
              lambda: st.store_at(host, loop))


MEMORY_PRIMITIVES = {"cache_write": (1.0, _cache_write), "cache_read": (1.0, _cache_read),
                     "rfactor": (1.2, _rfactor), "slide": (1.0, _slide)}


# ---- running the steps ---------------------------------------------------------------------

def _snapshot(s) -> tuple:
    """What a refused primitive must leave unchanged: the steps and every stage's state."""
    return len(s.steps), s.state


class _Runner:
    """Tries primitive calls on a case's schedule, recording and counting them."""

    def __init__(self, case: Case):
        self.case = case
        self.count = 0

    def attempt(self, text: str, thunk):
        self.count += 1
        before = _snapshot(self.case.s)
        try:
            out = thunk()
        except lt.ScheduleError as e:
            self.case.refused_steps += 1
            self.case.attempts.append(f"{text}  -> REFUSED: {e}")
            if _snapshot(self.case.s) != before:
                raise Bug(f"the refused call {text} changed the schedule before raising "
                          f"ScheduleError:\n  before: {before}\n  after:  "
                          f"{_snapshot(self.case.s)}") from None
            return REFUSED
        except Exception:  # noqa: BLE001 - any other exception is the finding
            self.case.attempts.append(f"{text}  -> RAISED (not ScheduleError)")
            raise Bug(f"{text} raised something other than ScheduleError:\n"
                      f"{traceback.format_exc()}") from None
        self.case.attempts.append(text)
        return out


_ALL = {**LOOP_PRIMITIVES, **MEMORY_PRIMITIVES}
_NAMES = list(_ALL)
_WEIGHTS = np.array([_ALL[n][0] for n in _NAMES]) / sum(_ALL[n][0] for n in _NAMES)


def _one_step(r: _Runner, s, rng) -> None:
    name = _NAMES[int(rng.choice(len(_NAMES), p=_WEIGHTS))]
    bad = bool(rng.random() < BAD_CHOICE)
    if name in MEMORY_PRIMITIVES:
        MEMORY_PRIMITIVES[name][1](r, s, rng, bad)
        return
    stages = _live_stages(s)
    if name.startswith("compute_") and not bad:
        stages = [st for st in stages if not st.is_output] or stages
    st = _choice(rng, s.stages if bad else stages)
    picked = LOOP_PRIMITIVES[name][1](s, st, rng, bad)
    if picked is not None:
        r.attempt(*picked)


def generate(seed: int, sanitize: bool = False) -> Case:
    """The case of ``seed``: operator, sizes and steps applied, lowered and replay-checked."""
    rng = np.random.default_rng(seed)
    op_name = OP_NAMES[int(rng.integers(len(OP_NAMES)))]
    params = draw_params(op_name, rng)
    case = Case(seed, op_name, params, sanitize)
    case.op = make_op(op_name, params)
    case.s = case.op.schedule()
    n, r = int(rng.integers(3, 11)), _Runner(case)
    try:
        for _ in range(10 * n):     # a picker may decline (nothing to fuse...): retry
            if r.count >= n:
                break
            _one_step(r, case.s, rng)
        _lower(case)
        if case.lowered is not None:
            _check_replay(case)
    except Bug as e:
        case.bug = str(e)
    return case


def _lower(case: Case) -> None:
    try:
        case.lowered = str(lt.lower(case.s, case.op.args))
    except lt.ScheduleError as e:
        case.lower_refusal = str(e)
    except Exception:  # noqa: BLE001 - any other exception is the finding
        raise Bug(f"lower raised something other than ScheduleError:\n"
                  f"{traceback.format_exc()}") from None


def replay_case(op_name: str, params: dict, steps_json: str):
    """A fresh operator and its schedule with the recorded steps replayed (via JSON)."""
    op = make_op(op_name, params)
    return op, lt.replay(op.schedule(), steps_mod.loads(steps_json))


def exec_case(op_name: str, params: dict, steps_text: str):
    """A fresh operator and its schedule with the printed steps (``str(step)`` lines) run as
    Python."""
    op = make_op(op_name, params)
    s = op.schedule()
    exec(steps_text, steps_mod.namespace(s))  # noqa: S102 - the printed steps are the input
    return op, s


def _check_replay(case: Case) -> None:
    """The steps are the schedule: folded onto a fresh schedule through JSON, and run as their
    printed Python, they give the same stages and the same loop nest."""
    text = "\n".join(case.steps)
    rebuilds = {
        "replaying the recorded steps": lambda: replay_case(case.op_name, case.params,
                                                            case.steps_json),
        "running the printed steps": lambda: exec_case(case.op_name, case.params, text)}
    for how, rebuild in rebuilds.items():
        try:
            op, s = rebuild()
            again = str(lt.lower(s, op.args))
        except Exception:  # noqa: BLE001 - any other exception is the finding
            raise Bug(f"{how} failed:\n{traceback.format_exc()}") from None
        if again != case.lowered:
            raise Bug(f"{how} gives a different loop nest:\n{again}")
        if s.state != case.s.state or s.steps != case.s.steps:
            raise Bug(f"{how} gives different stages:\n{s.state}\n{case.s.state}")


def build_and_run(op: FuzzOp, s, target: str, data_seed: int, guard: bool = True) -> str | None:
    """Build ``s`` for ``target`` and compare its outputs with numpy: None or the mismatch."""
    f = lt.build(s, op.args, target=target)
    return run_and_compare(f, op, data_seed, guard)


def main(argv: list[str]) -> int:
    for seed in (int(a) for a in argv):
        case = generate(seed)
        print(case.describe())
        if case.bug:
            print("BUG:", case.bug)
        elif case.lowered is not None:
            print("result:", build_and_run(case.op, case.s, "c", seed) or "matches numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
