"""Knobs as Optuna parameters whose values are the knobs' values.

An Optuna trial's params are what optuna-dashboard, ``study.trials_dataframe()`` and
``optuna.visualization`` show, so each knob's param holds the knob's *value*, not its index:

==========================================  ===================================================
knob                                        param value (distribution)
==========================================  ===================================================
``define_split`` into 2 loops               the inner factor: ``tile_i: 12``
``define_knob`` of numbers                  the number: ``unroll: 16``
``define_knob`` of bools, strings, None     the value itself: ``parallel: True``
``define_knob`` of other values             their JSON text: ``shape: "[4, 8]"``
splits into 3+ loops, reorders, annotates   the entity as printed: ``"[2, 4, 2]"``,
                                            ``"[2, 0, 1]"``, ``"['none', 'vec']"``
==========================================  ===================================================

Integer values that step evenly (``[1, 2, 3, 4]``, ``[0, 8, 16]``) get an
``IntDistribution(low, high, step)``: every sampler sees their order. Other numbers
(divisors, powers of two) and other values get a ``CategoricalDistribution`` over the values
(numbers in increasing order).

Samplers that handle only numbers (``"cmaes"``, ``"qmc"``) sample a categorical knob at
random, so for those the knobs that are not an even integer step get an integer param named
``<knob>_rank`` (the position of the value in increasing order) or ``<knob>_index`` (the
knob's own index, for values without an order) instead.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LooptuneError
from .knobs import Knob, OtherKnob, SplitKnob, jsonable


@dataclass
class KnobParam:
    """One knob's Optuna parameter: its name, distribution, and the param value of each knob
    index (``values[i]``); ``index(value)`` maps a param value back."""

    knob: str
    name: str
    dist: Any
    values: list
    _lookup: dict

    def index(self, value: Any) -> int:
        """The knob index of param ``value``; LooptuneError when the knob has no such value."""
        try:
            i = self._lookup.get(value)
        except TypeError:           # an unhashable value
            i = None
        if i is None:
            raise LooptuneError(f"OptunaTuner: param {self.name}={value!r} is not a value of "
                                f"knob '{self.knob}'; its values are {_some(self.values)}")
        return i


def _some(values: list, n: int = 8) -> str:
    shown = ", ".join(repr(v) for v in values[:n])
    return f"[{shown}{', ...' if len(values) > n else ''}]"


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def knob_values(knob: Knob) -> list:
    """The param value of each index of ``knob`` (see the module docstring)."""
    n = len(knob)
    if isinstance(knob, SplitKnob) and knob.num_outputs == 2:
        return [knob.get(i).size[1] for i in range(n)]
    if isinstance(knob, OtherKnob):
        vals = [_scalar(v) for v in knob.values]
        plain = all(v is None or isinstance(v, (bool, int, float, str)) for v in vals)
        # 1, 1.0 and True are equal in Python (and to Optuna's choice lookup): use JSON text
        if plain and len({(v, type(v)) for v in vals}) == len(set(vals)):
            return vals
        return [json.dumps(jsonable(v), sort_keys=True) for v in vals]
    return [str(knob.get(i)) for i in range(n)]


def _even_step(vals: list) -> int | None:
    """The step of integers that step evenly from low to high (1 for one value), else None."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return None
    s = sorted(vals)
    if len(s) == 1:
        return 1
    step = s[1] - s[0]
    if step <= 0 or any(b - a != step for a, b in itertools.pairwise(s)):
        return None
    return step


def knob_param(optuna, name: str, knob: Knob, numeric_only: bool) -> KnobParam:
    """The Optuna parameter of knob ``name`` (see the module docstring)."""
    D = optuna.distributions
    vals = knob_values(knob)
    n = len(vals)
    step = _even_step(vals)
    if step is not None:
        dist = D.IntDistribution(min(vals), max(vals), step=step)
        return KnobParam(name, name, dist, vals, {v: i for i, v in enumerate(vals)})
    numeric = all(_is_number(v) and not math.isnan(v) for v in vals)
    order = sorted(range(n), key=lambda i: (vals[i], i)) if numeric else list(range(n))
    if numeric_only:
        suffix = "_rank" if numeric else "_index"
        rank = [0] * n
        for r, i in enumerate(order):
            rank[i] = r
        return KnobParam(name, name + suffix, D.IntDistribution(0, n - 1), rank,
                         {r: i for i, r in enumerate(rank)})
    choices = tuple(vals[i] for i in order)
    return KnobParam(name, name, D.CategoricalDistribution(choices), vals,
                     {v: i for i, v in enumerate(vals)})


def knob_params(optuna, knobs: dict[str, Knob], numeric_only: bool) -> dict[str, KnobParam]:
    """Every knob's parameter, by knob name; LooptuneError when two params would share a name
    (a knob named like another's ``_rank``/``_index`` param)."""
    out = {name: knob_param(optuna, name, k, numeric_only) for name, k in knobs.items()}
    names = [p.name for p in out.values()]
    clash = sorted({x for x in names if names.count(x) > 1})
    if clash:
        raise LooptuneError(f"OptunaTuner: knobs {sorted(out)} give two Optuna params the "
                            f"name(s) {clash}; rename the knob(s) ending in _rank or _index")
    return out
