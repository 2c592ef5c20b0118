"""GBTOptions: the old keyword arguments of GBTTuner map onto one frozen dataclass, string modes
become enums with errors listing the choices, every range is checked, and a second cost model
plugs in through ``model_factory``."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import looptune as lt
import numpy as np
import pytest
from looptune.errors import LooptuneError
from looptune.search import MeasureOption, create_task
from looptune.search.cost_model import CostModel, Objective
from looptune.search.gbt_tuner import GBTOptions, GBTTuner
from looptune.search.proposer import Scoring
from looptune.search.transfer import TransferSlots


@pytest.fixture(scope="module")
def task():
    return create_task("test_matmul", (8, 8, 8))


def test_keyword_arguments_and_options_are_the_same_thing(task):
    a = GBTTuner(task, seed=1, eps=0.2, explore=16, objective="log", transfer_slots="start")
    b = GBTTuner(task, seed=1, options=GBTOptions(eps=0.2, explore=16, objective=Objective.LOG,
                                                  transfer_slots=TransferSlots.START))
    assert a.options == b.options
    assert a.options.objective is Objective.LOG and a.options.transfer_slots is TransferSlots.START
    assert a.options.scoring is Scoring.TWO_STAGE          # the default
    # keywords given with options= replace those fields
    c = GBTTuner(task, options=b.options, eps=0.3)
    assert c.options == dataclasses.replace(b.options, eps=0.3)
    assert GBTTuner(task).options == GBTOptions()
    # the enums still compare equal to the old strings
    assert a.options.transfer_slots == "start" and a.transfer_slots == "start"


def test_options_read_as_attributes_and_setting_one_replaces_the_options(task):
    t = GBTTuner(task, n_init=5)
    assert t.n_init == 5 and t.plan_size == 8
    old = t.options
    t.eps = 0.5
    assert t.options == dataclasses.replace(old, eps=0.5) and old.eps == 0.1
    assert t.proposer.options is t.options and t.transfer.options is t.options
    with pytest.raises(LooptuneError, match=r"eps must be a number in \[0.0, 1.0\]; got 7"):
        t.eps = 7
    assert t.options.eps == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.options.eps = 0.2


def test_transfer_logs_are_a_tuple_and_one_path_is_one_log(task, tmp_path):
    assert GBTOptions(transfer_logs=[tmp_path / "a.jsonl"]).transfer_logs == \
        (tmp_path / "a.jsonl",)
    assert GBTOptions(transfer_logs=str(tmp_path / "b.jsonl")).transfer_logs == \
        (str(tmp_path / "b.jsonl"),)
    assert GBTOptions(transfer_logs=None).transfer_logs == ()


@pytest.mark.parametrize("kw, msg", [
    ({"objective": "pairwise"}, r"objective must be one of rank, log; got 'pairwise'"),
    ({"scoring": "wide"}, r"scoring must be one of two_stage, loop_nest; got 'wide'"),
    ({"transfer_slots": "eps"}, r"transfer_slots must be one of warm, start, random; got 'eps'"),
    ({"eps": 2.0}, r"eps must be a number in \[0.0, 1.0\]; got 2.0"),
    ({"random_share": -0.1}, r"random_share must be a number in \[0.0, 1.0\]; got -0.1"),
    ({"diversity": -1.0}, r"diversity must be a number >= 0.0; got -1.0"),
    ({"plan_size": 0}, r"plan_size must be an int >= 1; got 0"),
    ({"n_init": 2.5}, r"n_init must be an int >= 1; got 2.5"),
    ({"candidates": 0}, r"candidates must be an int >= 1; got 0"),
    ({"explore": True}, r"explore must be an int >= 1; got True"),
    ({"n_warm": -1}, r"n_warm must be an int >= 0; got -1"),
    ({"model_params": [1]}, r"model_params must be a dict"),
    ({"model_factory": "gbt"}, r"model_factory must be a callable seed -> CostModel; got 'gbt'"),
])
def test_bad_options_name_the_option_and_what_it_takes(task, kw, msg):
    with pytest.raises(LooptuneError, match=msg):
        GBTOptions(**kw)
    with pytest.raises(LooptuneError, match=msg):
        GBTTuner(task, **kw)


def test_unknown_keywords_and_wrong_options_types_are_refused(task):
    with pytest.raises(LooptuneError, match=r"unknown option 'epsilon'; the options are "
                                            r"objective, n_init, eps, "):
        GBTTuner(task, epsilon=0.1)
    with pytest.raises(LooptuneError, match=r"options must be a GBTOptions; got dict"):
        GBTTuner(task, options={"eps": 0.1})
    with pytest.raises(LooptuneError, match=r"GBTTuner.options must be a GBTOptions; got dict"):
        GBTTuner(task).options = {"eps": 0.1}


def test_model_params_that_the_regressor_does_not_take_are_named(task, fake_measure):
    t = GBTTuner(task, seed=0, n_init=2, model_params={"max_depht": 3})
    fake_measure(t, lambda i: 1e-4 * (1 + i % 5))
    with pytest.raises(LooptuneError, match=r"model_params \{'max_depht': 3\} do not fit "
                                            r"HistGradientBoostingRegressor"):
        t.tune(24, MeasureOption(n_parallel=8, remeasure_top=0))


class _Nearest(CostModel):
    """A second cost model: the target of the nearest training row."""

    made: ClassVar[list] = []

    def __init__(self, seed):
        self.seed = seed
        _Nearest.made.append(self)

    def fit(self, x, y, sample_weight=None):
        self.x, self.y = np.asarray(x), np.asarray(y)
        return self

    def predict(self, x):
        d = ((np.asarray(x)[:, None, :] - self.x[None]) ** 2).sum(-1)
        return self.y[d.argmin(1)]


def test_a_second_cost_model_plugs_in_through_model_factory(task, fake_measure):
    _Nearest.made.clear()
    t = GBTTuner(task, seed=3, n_init=4, explore=8, candidates=256, model_factory=_Nearest)
    sp = task.config_space
    fm = fake_measure(t, lambda i: 1e-4 * (1 + sum(sp.vector(i))))
    best = t.tune(32, MeasureOption(n_parallel=8, remeasure_top=0))
    assert len(set(fm.measured)) == len(fm.measured) == 32 and best.ok
    assert isinstance(t.model, _Nearest) and isinstance(t.scorers["knob"].model, _Nearest)
    assert {m.seed for m in _Nearest.made} == {3}
    assert lt.search.GBTTuner is GBTTuner


def test_the_docstrings_say_what_the_tuner_does_and_the_figures_live_in_the_notes():
    import os

    import looptune.search.gbt_tuner as mod
    for doc in (mod.__doc__, GBTTuner.__doc__):
        assert len(doc.strip().splitlines()) <= 20 and "GFLOP/s" not in doc
    notes = os.path.join(os.path.dirname(os.path.dirname(mod.__file__)), "benchmarks",
                         "NOTES.md")
    with open(notes) as f:
        text = f.read()
    assert "## GBT tuner" in text and "311 to 383 GFLOP/s" in text
