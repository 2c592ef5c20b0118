"""The Schedule: one Stage per compute of a DAG, in producer-before-consumer order."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import ScheduleError
from ..lang.expr import IterVar
from ..lang.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from .stage import Stage, StageState
from .steps import Step


def _topo_ops(outputs: Sequence[Tensor]) -> list:
    order, seen = [], set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.inputs:
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order


def topo_ops(outputs: Sequence[Tensor]) -> list:
    """Every op that ``outputs`` depend on, placeholders included, each after the ops it reads
    (depth first, inputs in order): the order of a schedule's stages."""
    return _topo_ops(outputs)


class Schedule:
    """How to compute ``outputs``: ``s[T]`` is the Stage of tensor T."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = list(outputs)
        self.steps: list[Step] = []
        self.stages: list[Stage] = []
        self._stage_of: dict[int, Stage] = {}
        names: set[str] = set()
        for op in _topo_ops(self.outputs):
            if isinstance(op, ComputeOp):
                self._add_stage(op, names)
        for t in self.outputs:
            self._stage_of[id(t)].is_output = True

    def unique_name(self, base: str, names: set[str] | None = None) -> str:
        """``base``, or ``base_1``, ``base_2``... whichever no stage is called yet."""
        names = names if names is not None else {s.name for s in self.stages}
        name, n = base, 1
        while name in names:
            name, n = f"{base}_{n}", n + 1
        return name

    def _add_stage(self, op, names: set[str] | None = None, index: int | None = None) -> Stage:
        names = names if names is not None else {s.name for s in self.stages}
        name = self.unique_name(op.name, names)
        names.add(name)
        st = Stage(op, self, name)
        if index is None:
            self.stages.append(st)
        else:
            self.stages.insert(index, st)
        self._stage_of[id(op.output)] = st
        return st

    def __getitem__(self, t) -> Stage:
        """The stage of tensor ``t`` (or of the operation ``t``); ``s['C']`` finds it by the
        tensor's name, which must name one stage (else index by the tensor)."""
        if isinstance(t, str):
            return self._by_name(t)
        t = t if isinstance(t, Tensor) else getattr(t, "output", t)
        st = self._stage_of.get(id(t))
        if st is not None:
            return st
        op = getattr(t, "op", None)
        name = getattr(t, "name", repr(t))
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"s[{name}]: '{name}' is a placeholder (an input); it has no "
                                "loops to schedule")
        raise ScheduleError(f"s[{name}]: tensor '{name}' is not computed by this schedule; "
                            f"its stages are {[s.name for s in self.stages]}")

    def _by_name(self, name: str) -> Stage:
        found = [st for st in self.stages if st.tensor.name == name]
        if len(found) > 1:
            names = ", ".join(f"'{st.name}'" for st in found)
            raise ScheduleError(f"s['{name}']: the name is ambiguous: {len(found)} stages "
                                f"compute a tensor called '{name}' ({names}); index by the "
                                f"tensor instead, s[{name}], or give the computes distinct "
                                "names")
        if found:
            return found[0]
        by_stage = [st for st in self.stages if st.name == name]
        if by_stage:
            return by_stage[0]
        raise ScheduleError(f"s['{name}']: no stage computes a tensor called '{name}'; stages "
                            f"are {[st.name for st in self.stages]}")

    def stage(self, name: str) -> Stage:
        for st in self.stages:
            if st.name == name:
                return st
        raise ScheduleError(f"no stage named '{name}'; stages are {[s.name for s in self.stages]}")

    def has_stage(self, t: Tensor) -> bool:
        return id(t) in self._stage_of

    def _owner_of(self, loop: IterVar) -> Stage | None:
        for st in self.stages:
            if loop in st.all_iter_vars:
                return st
        return None

    def readers(self, stage: Stage) -> list[Stage]:
        """Stages whose op loads ``stage``'s tensor directly."""
        t = stage.tensor
        return [s for s in self.stages if any(x is t for x in s.op.inputs)]

    def _reads_transitively(self, consumer: Stage, producer: Stage) -> bool:
        """Does ``consumer`` read ``producer``, directly or through other computes?"""
        t = producer.tensor
        stack, seen = [consumer.op], set()
        while stack:
            op = stack.pop()
            for x in op.inputs:
                if x is t:
                    return True
                if id(x) not in seen and self.has_stage(x):
                    seen.add(id(x))
                    stack.append(self[x].op)
        return False

    def tensor(self, name: str) -> Tensor:
        """The tensor of stage ``name``, else the input (placeholder) called ``name``."""
        for st in self.stages:
            if st.name == name:
                return st.tensor
        for st in self.stages:
            for x in st.op.inputs:
                if x.name == name:
                    return x
        raise ScheduleError(f"s.tensor('{name}'): no stage or input is called '{name}'; "
                            f"stages are {[st.name for st in self.stages]}")

    # ---- steps -------------------------------------------------------------------------------

    def apply_step(self, step: Step):
        """Validate ``step`` (its ``ScheduleError`` leaves ``self`` unchanged), apply it and
        record it in ``self.steps``; returns what the primitive returns."""
        step.validate(self)
        out = step.apply(self)
        self.steps.append(step)
        return out

    @property
    def state(self) -> tuple[StageState, ...]:
        """Every stage's loop nest by names (equal for equal folds of the steps)."""
        return tuple(st.state for st in self.stages)

    def replayed(self) -> Schedule:
        """A fresh schedule of the same outputs with ``self.steps`` folded onto it: what the
        steps alone say this schedule is (``s.replayed().state == s.state``)."""
        return replay(Schedule(self.outputs), self.steps)

    # ---- memory primitives (memory.py) --------------------------------------------------------

    def cache_write(self, t: Tensor, scope: str) -> Tensor:
        """See :func:`looptune.schedule.memory.cache_write`."""
        from .memory import cache_write
        return cache_write(self, t, scope)

    def cache_read(self, t: Tensor, scope: str, readers) -> Tensor:
        """See :func:`looptune.schedule.memory.cache_read`."""
        from .memory import cache_read
        return cache_read(self, t, scope, readers)

    def rfactor(self, t: Tensor, loop: IterVar) -> Tensor:
        """See :func:`looptune.schedule.memory.rfactor`."""
        from .memory import rfactor
        return rfactor(self, t, loop)

    def __repr__(self):
        return f"Schedule(stages={[s.name for s in self.stages]})"


def create_schedule(outputs) -> Schedule:
    """A schedule computing ``outputs`` (a tensor, its operation ``t.op`` as in TVM, or a list
    of them) with every stage at root."""
    single = isinstance(outputs, (Tensor, Operation)) or not isinstance(outputs, Iterable)
    outs = [outputs] if single else list(outputs)
    outs = [t.output if isinstance(t, Operation) else t for t in outs]
    for t in outs:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"create_schedule: expected the output tensors (or their "
                                f"operations, t.op); got {t!r}")
        if isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"create_schedule: '{t.name}' is a placeholder; schedule the "
                                "computes that produce your outputs")
    return Schedule(outs)


def replay(s: Schedule, steps: Sequence[Step]) -> Schedule:
    """Apply recorded ``steps`` (``s.steps`` of a schedule of the same computation, or
    ``steps.loads`` of a tuning log) to ``s``, a fresh schedule: the identical loop nest."""
    for step in steps:
        s.apply_step(step)
    return s
