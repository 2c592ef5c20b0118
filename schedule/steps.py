"""A schedule as data: the primitives applied, as small frozen values.

Every primitive records one Step naming its stage and loops by their (stage-unique) names, so
the steps print readably (``looptune show --steps``), serialise into tuning logs, and replay on
a fresh schedule of the same computation to give the identical loop nest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Step:
    primitive: str          # split, fuse, reorder, unroll, ..., cache_write, rfactor
    stage: str              # stage (or tensor) name the primitive was applied to
    args: tuple             # loop names, ints and strings only

    def __str__(self) -> str:
        args = ", ".join(repr(a) if isinstance(a, str) else str(a) for a in self.args)
        return f"s[{self.stage}].{self.primitive}({args})"

    def to_json(self) -> list:
        return [self.primitive, self.stage, list(_jsonable(a) for a in self.args)]

    @staticmethod
    def from_json(obj) -> Step:
        prim, stage, args = obj
        return Step(prim, stage, tuple(tuple(a) if isinstance(a, list) else a for a in args))


def _jsonable(a):
    return list(a) if isinstance(a, tuple) else a


def dumps(steps) -> str:
    return json.dumps([s.to_json() for s in steps])


def loads(text: str) -> list[Step]:
    return [Step.from_json(o) for o in json.loads(text)]
