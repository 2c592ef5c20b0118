"""A schedule as data: each primitive applied is a small frozen step value.

A step names its stage and loops by their (stage-unique) names, never by object, so it

- validates and applies itself to any schedule of the same computation: ``validate(s)`` raises
  the primitive's ``ScheduleError`` and changes nothing, ``apply(s)`` (only after
  ``validate``) rewrites the stage and returns what the public method returns;
- prints as the Python that applies it (``str(step)``: ``s[C].split(s[C].loop('i'),
  factor=8)``; run it with ``exec(text, namespace(s))``);
- serialises to the tuning logs' JSON, ``[primitive, stage, [args...]]`` (``dumps``/``loads``).

The public primitives (``s[C].split(...)``, ``s.cache_write(...)``) check the objects they are
given, build a step and run it with :meth:`Schedule.apply_step` (validate, apply, append to
``s.steps``); :func:`replay` does the same for each recorded step, so the steps are the one
source of truth: a schedule is what folding its steps onto a fresh schedule gives.

Adding a primitive: a step class (in ``loop_steps.py``, or beside its mechanism as
``memory.py`` does) with its fields, ``PRIMITIVES``, ``validate``, ``apply`` and ``__str__``
(``args``/``from_args`` default to the fields after ``stage``), and the public method that
builds it. Defining the class registers it for ``loads``.
"""
from __future__ import annotations

import json
import keyword
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule

_REGISTRY: dict[str, type[Step]] = {}


@dataclass(frozen=True, slots=True)
class Step:
    """One applied primitive; ``stage`` names the stage (``cache_read``: the tensor) it acts
    on. Subclasses list their JSON names in ``PRIMITIVES``."""

    stage: str

    PRIMITIVES: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls):   # (no super(): slots=True rebuilds the class)
        for name in cls.PRIMITIVES:        # the slots=True rebuild registers last: it wins
            _REGISTRY[name] = cls

    @property
    def primitive(self) -> str:
        """The method's name (and the JSON record's first field)."""
        return self.PRIMITIVES[0]

    @property
    def args(self) -> tuple:
        """The JSON arguments: loop and stage names, ints and strings. By default the
        fields after ``stage``, in order (override for a variadic or derived record)."""
        return tuple(getattr(self, f.name) for f in fields(self)[1:])

    @classmethod
    def from_args(cls, primitive: str, stage: str, args: tuple) -> Step:
        """The step of a JSON record's arguments; by default one per field after ``stage``."""
        return cls(stage, *unpack(primitive, stage, args, len(fields(cls)) - 1))

    def validate(self, s: Schedule) -> None:
        """Raise the primitive's ``ScheduleError`` if it cannot apply to ``s``; never change
        ``s``."""
        raise NotImplementedError(type(self).__name__)

    def apply(self, s: Schedule) -> Any:
        """Rewrite ``s`` (``validate`` passed); return what the public primitive returns."""
        raise NotImplementedError(type(self).__name__)

    def to_json(self) -> list:
        return [self.primitive, self.stage, [_jsonable(a) for a in self.args]]

    @staticmethod
    def from_json(obj) -> Step:
        """The step of a ``[primitive, stage, [args...]]`` record (tuning logs of any age)."""
        if not (isinstance(obj, (list, tuple)) and len(obj) == 3 and isinstance(obj[0], str)
                and isinstance(obj[1], str) and isinstance(obj[2], (list, tuple))):
            raise ScheduleError(f"replay: a step is [primitive, stage, [args...]]; got {obj!r}")
        prim, stage, args = obj
        cls = _REGISTRY.get(prim)
        if cls is None:
            raise ScheduleError(f"replay: unknown primitive '{prim}' in step {list(obj)!r}; "
                                f"known primitives are {', '.join(sorted(_REGISTRY))}")
        args = tuple(tuple(a) if isinstance(a, list) else a for a in args)
        return cls.from_args(prim, stage, args)


def primitives() -> dict[str, type[Step]]:
    """Every registered primitive name and its step class."""
    return dict(_REGISTRY)


def unpack(prim: str, stage: str, args: tuple, n: int) -> tuple:
    """``args`` of a JSON record, checked to hold ``n`` values."""
    if len(args) != n:
        raise ScheduleError(f"replay: step {prim} of '{stage}' takes {n} argument(s); got "
                            f"{list(args)!r}")
    return args


def _jsonable(a):
    return list(a) if isinstance(a, tuple) else a


def dumps(steps) -> str:
    return json.dumps([s.to_json() for s in steps])


def loads(text: str) -> list[Step]:
    return [Step.from_json(o) for o in json.loads(text)]


# ---- printing steps as Python --------------------------------------------------------------

def _is_ident(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and name != "s"


def stage_ref(name: str) -> str:
    """Python for the stage ``name``: ``s[C]`` (``C`` bound by :func:`namespace`), or
    ``s.stage('C.local')`` when the name is no identifier."""
    return f"s[{name}]" if _is_ident(name) else f"s.stage({name!r})"


def loop_ref(stage: str, loop: str) -> str:
    return f"{stage_ref(stage)}.loop({loop!r})"


def tensor_ref(name: str) -> str:
    """Python for the tensor of stage (or the input) ``name``."""
    return name if _is_ident(name) else f"s.tensor({name!r})"


def namespace(s: Schedule) -> dict:
    """The names printed steps use: ``s`` and each stage's tensor and each input by name.
    ``exec('\\n'.join(map(str, steps)), namespace(s))`` applies ``steps`` to ``s``."""
    ns: dict[str, Any] = {}
    for st in s.stages:
        for t in st.op.inputs:
            if _is_ident(t.name) and not s.has_stage(t):
                ns.setdefault(t.name, t)
    ns.update({st.name: st.tensor for st in s.stages if _is_ident(st.name)})
    ns["s"] = s
    return ns
