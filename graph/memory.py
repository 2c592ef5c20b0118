"""Static memory planning for a compiled model: every intermediate value gets an offset in one
arena (TVM's and ONNX Runtime's planners).

```python
plan = plan_memory(steps=[(("x",), ("a",)), (("a",), ("b",)), (("b",), ("y",))],
                   nbytes={"a": 4096, "b": 4096})
plan.offsets["b"]          # (offset, nbytes) in the arena
plan.verify()              # no two values live at once share a byte
```

1. Liveness: a value is live from the step that writes it to the last step that reads it
   (inclusive), over the kernel sequence.
2. In-place: a step may write an output into the buffer of one of its inputs when the caller
   allows the pair (an elementwise kernel, same shape and dtype) and that input dies at this
   step; the two values then share one buffer whose lifetime is the union of theirs.
3. Greedy by size, best fit (Pisarchyk & Lee 2020, as TFLite's and ONNX Runtime's arena
   planners): buffers from the largest down; each goes into the smallest gap between the
   already placed buffers whose lifetimes overlap its own that can hold it, else above them.
   Offsets and sizes are multiples of ``alignment`` (64 bytes: a cache line, any vector).

Values the planner is not given (graph inputs, weights, graph outputs) are not in the arena.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

ALIGNMENT = 64

Steps = Sequence[tuple[Sequence[str], Sequence[str]]]     # (reads, writes) per step


@dataclass
class Buffer:
    """A region of the arena and the values that use it, one after the other."""

    index: int
    size: int                            # bytes, a multiple of the alignment
    start: int                           # first step it is live
    end: int                             # last step it is live
    values: list[str] = field(default_factory=list)
    offset: int = -1

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan:
    """Where each planned value lives: ``offsets[value] = (offset, nbytes)`` in an arena of
    ``arena_bytes``; ``lifetimes[value] = (first step, last step)``; ``inplace`` lists each
    ``(step, input, output)`` that shares a buffer."""

    offsets: dict[str, tuple[int, int]]
    lifetimes: dict[str, tuple[int, int]]
    buffers: list[Buffer]
    inplace: list[tuple[int, str, str]]
    arena_bytes: int
    naive_bytes: int
    alignment: int = ALIGNMENT

    @property
    def peak_live_bytes(self) -> int:
        """The most bytes live at one step: no plan can use a smaller arena (before
        alignment and in-place sharing)."""
        last = max((e for _, e in self.lifetimes.values()), default=-1)
        return max((sum(self.offsets[v][1] for v, (s, e) in self.lifetimes.items()
                        if s <= k <= e) for k in range(last + 1)), default=0)

    def report(self) -> dict:
        """The plan as data: arena size vs the sum of all intermediates, each buffer's offset,
        size, values and lifetime, each value's offset, size, lifetime and buffer."""
        buf_of = {v: b.index for b in self.buffers for v in b.values}
        return {
            "arena_bytes": self.arena_bytes,
            "naive_bytes": self.naive_bytes,
            "peak_live_bytes": self.peak_live_bytes,
            "alignment": self.alignment,
            "buffers": [{"index": b.index, "offset": b.offset, "bytes": b.size,
                         "start": b.start, "end": b.end, "values": list(b.values)}
                        for b in self.buffers],
            "values": {v: {"offset": off, "bytes": n, "start": self.lifetimes[v][0],
                           "end": self.lifetimes[v][1], "buffer": buf_of[v]}
                       for v, (off, n) in self.offsets.items()},
            "inplace": [{"step": s, "input": i, "output": o} for s, i, o in self.inplace],
        }

    def verify(self) -> None:
        """Raise AssertionError when two values live at the same time share a byte (other
        than an in-place pair at its step), or a value leaves the arena or is misaligned."""
        shared = {(i, o, s) for s, i, o in self.inplace}
        items = sorted(self.offsets.items(), key=lambda kv: kv[1][0])
        for v, (off, n) in items:
            assert off % self.alignment == 0, f"value '{v}' at offset {off} is not aligned"
            assert 0 <= off and off + n <= self.arena_bytes, f"value '{v}' leaves the arena"
        for a, (va, (oa, na)) in enumerate(items):
            sa, ea = self.lifetimes[va]
            for vb, (ob, nb) in items[a + 1:]:
                if ob >= oa + na:
                    break                       # sorted by offset: no later one overlaps va
                sb, eb = self.lifetimes[vb]
                if sa > eb or sb > ea or min(na, nb) == 0:
                    continue
                ok = (ea == sb and (va, vb, ea) in shared) or (eb == sa and (vb, va, eb) in
                                                                shared)
                assert ok, (f"values '{va}' (steps {sa}..{ea}, bytes {oa}..{oa + na}) and "
                            f"'{vb}' (steps {sb}..{eb}, bytes {ob}..{ob + nb}) are live at "
                            "once in overlapping memory")


def _round(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def liveness(steps: Steps, planned: Iterable[str]) -> dict[str, tuple[int, int]]:
    """``value -> (step writing it, last step reading it)`` for the ``planned`` values; a
    value never read lives at its own step only."""
    planned = set(planned)
    life: dict[str, list[int]] = {}
    for k, (reads, writes) in enumerate(steps):
        for v in reads:
            if v in planned:
                assert v in life, f"step {k} reads '{v}' before any step writes it"
                life[v][1] = k
        for v in writes:
            if v in planned:
                assert v not in life, f"value '{v}' is written by two steps"
                life[v] = [k, k]
    missing = planned - set(life)
    assert not missing, f"no step writes {sorted(missing)}"
    return {v: (s, e) for v, (s, e) in life.items()}


def plan_memory(steps: Steps, nbytes: dict[str, int],
                inplace: Callable[[int], Iterable[tuple[str, str]]] | None = None,
                alignment: int = ALIGNMENT) -> MemoryPlan:
    """Plan the values of ``nbytes`` (value -> size) over ``steps`` (each ``(reads,
    writes)``, in execution order). ``inplace(k)`` names the ``(output, input)`` pairs step k
    may compute in place; a pair is taken when both are planned, the input dies at step k,
    and neither is taken yet."""
    life = liveness(steps, nbytes)
    owner: dict[str, Buffer] = {}
    buffers: list[Buffer] = []
    shared: list[tuple[int, str, str]] = []
    for k, (reads, writes) in enumerate(steps):
        for v in writes:
            if v not in nbytes:
                continue
            into = _inplace_input(k, v, inplace, nbytes, life, owner, shared)
            if into is not None:
                b = owner[into]
                b.end = max(b.end, life[v][1])
                b.size = max(b.size, _round(nbytes[v], alignment))
                shared.append((k, into, v))
            else:
                b = Buffer(len(buffers), _round(nbytes[v], alignment), *life[v])
                buffers.append(b)
            b.values.append(v)
            owner[v] = b
    arena = _place(buffers)
    offsets = {v: (owner[v].offset, nbytes[v]) for v in nbytes}
    return MemoryPlan(offsets, life, buffers, shared, arena, sum(nbytes.values()), alignment)


def _inplace_input(k, out, inplace, nbytes, life, owner, shared) -> str | None:
    if inplace is None:
        return None
    taken = {i for _, i, _ in shared}
    for o, i in inplace(k):
        if (o == out and i in owner and i not in taken and life[i][1] == k
                and owner[i].values[-1] == i and nbytes[i] >= nbytes[out]):
            return i
    return None


def _place(buffers: list[Buffer]) -> int:
    """Greedy by size, best fit: offsets for every buffer; returns the arena size."""
    placed: list[Buffer] = []
    for b in sorted(buffers, key=lambda b: (-b.size, b.start, b.index)):
        best, best_gap, top = None, None, 0
        for p in sorted((p for p in placed if p.overlaps_in_time(b)), key=lambda p: p.offset):
            gap = p.offset - top
            if gap >= b.size and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
            top = max(top, p.offset + p.size)
        b.offset = top if best is None else best
        placed.append(b)
    return max((b.offset + b.size for b in buffers), default=0)
