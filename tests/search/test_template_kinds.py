"""Template kinds: a function template and the auto scheduler's DagTemplate describe
themselves with a JSON-able spec(), and a worker process re-creates either from it by kind
(``template_from_spec``); the tuner registry maps every tuner name to its class."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import looptune as lt
import numpy as np
import pytest
from looptune.errors import LooptuneError
from looptune.search import auto_task, create_task, template
from looptune.search.auto import machine_sketch, sketch
from looptune.search.task import task_from_spec
from looptune.search.template import (
    TEMPLATE_KINDS,
    DagTemplate,
    Template,
    find_template,
    get_template,
    register,
    template_from_spec,
)
from looptune.search.tuners import TUNERS, GridTuner, RandomTuner, make_tuner, tuner_class

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _scaled_sum(n=13, m=29):
    """B[i] = sum_j A[i, j] * 0.5 + 1: a reduction and an elementwise stage, odd sizes."""
    A = lt.placeholder((n, m), "float32", name="A")
    j = lt.reduce_axis((0, m), "j")
    S = lt.compute((n,), lambda i: lt.sum(A[i, j], axis=j), name="S")
    B = lt.compute((n,), lambda i: S[i] * 0.5 + 1.0, name="B")
    return [A, B]


def _run(s, tensors, a: np.ndarray) -> np.ndarray:
    f = lt.build(s, tensors)
    out = np.full(tensors[1].shape, np.nan, dtype="float32")
    f(a, out)
    return out


# ---- DagTemplate ---------------------------------------------------------------------------

def test_an_auto_task_has_a_dag_template_with_declared_fields():
    args = _scaled_sum()
    task = auto_task(args)
    tpl = task.template
    assert isinstance(tpl, DagTemplate) and tpl.kind == "dag"
    assert tpl.tensors == tuple(args) and tpl.sketch is machine_sketch
    assert set(tpl.options) == {"gpu", "simd_bytes", "threads", "llc_bytes"} and tpl.options["gpu"] is False
    assert tpl.steps_identify_program and tpl.importable
    assert find_template(task.name) is tpl is get_template(task.name)
    assert auto_task(args).template is tpl                   # the same tensors: reused
    other = auto_task(_scaled_sum())                         # equal DAG, other objects
    assert other.name == task.name and other.template is not tpl
    assert find_template(task.name) is other.template


def test_a_dag_template_spec_is_json_and_rebuilds_the_same_task():
    args = _scaled_sum()
    task = auto_task(args)
    spec = json.loads(json.dumps(task.spec()))
    assert spec["kind"] == "dag" and spec["args"] == [] and spec["target"] == task.target
    assert spec["sketch"] == "looptune.search.auto:machine_sketch"
    tpl = DagTemplate.from_spec(spec)
    assert tpl is not task.template and find_template(task.name) is tpl
    assert [t.name for t in tpl.tensors] == ["A", "B"] and tpl.options == task.template.options
    again = lt.search.Task(tpl, (), task.target)
    assert len(again.config_space) == len(task.config_space)
    for i in (0, len(task.config_space) // 2, len(task.config_space) - 1):
        assert str(lt.lower(*again.instantiate(i))) == str(lt.lower(*task.instantiate(i)))


SPEC_CHILD = r'''
import json, sys
import numpy as np
import looptune as lt
from looptune.search.task import task_from_spec
spec, index, a = json.loads(sys.stdin.read())
task = task_from_spec(spec)
s, tensors = task.instantiate(index)
f = lt.build(s, tensors)
out = np.full(tensors[1].shape, np.nan, dtype="float32")
f(np.array(a, dtype="float32"), out)
print(json.dumps([task.name, len(task.config_space), out.tolist()]))
'''


def test_a_fresh_process_rebuilds_a_dag_task_from_its_json_spec():
    """What a worker does: no module defines this DAG; its spec alone rebuilds the task,
    whose kernel then matches numpy."""
    args = _scaled_sum(n=11, m=37)
    task = auto_task(args)
    index = len(task.config_space) - 1
    a = np.random.default_rng(3).uniform(-1, 1, (11, 37)).astype("float32")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    p = subprocess.run([sys.executable, "-c", SPEC_CHILD], env=env, capture_output=True,
                       text=True, timeout=120, check=False,
                       input=json.dumps([task.spec(), index, a.tolist()]))
    assert p.returncode == 0, p.stderr[-3000:]
    name, size, out = json.loads(p.stdout.strip().splitlines()[-1])
    assert (name, size) == (task.name, len(task.config_space))
    np.testing.assert_allclose(np.array(out, dtype="float32"), a.sum(axis=1) * 0.5 + 1.0,
                               rtol=1e-5, atol=1e-5)
    here = _run(*task.instantiate(index), a)
    np.testing.assert_array_equal(np.array(out, dtype="float32"), here)


def test_a_dag_template_needs_a_module_level_sketch():
    def local_sketch(cfg, tensors):
        return sketch(cfg, tensors)

    with pytest.raises(LooptuneError, match=r"DagTemplate 'auto_x': the sketch must be a "
                       r"function defined at the top level of an importable module"):
        DagTemplate("auto_x", _scaled_sum(), local_sketch)


def test_a_sketch_the_worker_cannot_import_is_named():
    spec = dict(auto_task(_scaled_sum()).spec(), sketch="looptune.search.auto:no_such_sketch")
    with pytest.raises(LooptuneError, match=r"its sketch 'looptune.search.auto:no_such_sketch' "
                       r"cannot be imported in this worker \(AttributeError"):
        template_from_spec(spec)


def test_an_unknown_template_kind_lists_the_known_ones():
    assert set(TEMPLATE_KINDS) == {"function", "dag"}
    with pytest.raises(LooptuneError, match=r"template 'x': unknown template kind 'jit' "
                       r"\(known: function, dag\)"):
        template_from_spec({"kind": "jit", "name": "x"})


# ---- function templates ---------------------------------------------------------------------

def test_a_function_template_spec_is_json_and_round_trips_by_kind():
    k = 0.5

    @template("kinds_closure")
    def closure(cfg, n):
        A = lt.placeholder((n,), "float32", name="A")
        B = lt.compute((n,), lambda i: A[i] * k, name="B")
        return lt.create_schedule(B), [A, B]

    task = create_task("kinds_closure", (17,))
    spec = json.loads(json.dumps(task.spec()))
    assert spec["kind"] == "function" and isinstance(spec["pickled"], str)
    spec["name"] = "kinds_closure_copy"                  # not registered: unpickled
    copy = task_from_spec(spec)
    assert type(copy.template) is Template and get_template("kinds_closure_copy") is \
        copy.template
    s, (A, B) = copy.instantiate(None)
    a = np.arange(17, dtype="float32") - 8.0
    b = np.empty_like(a)
    lt.build(s, [A, B])(a, b)
    np.testing.assert_array_equal(b, a * 0.5)


def test_register_replaces_a_template_of_the_same_name():
    @template("kinds_twice")
    def first(cfg):
        raise AssertionError

    def second(cfg):
        raise AssertionError

    tpl = register(Template("kinds_twice", second))
    assert get_template("kinds_twice") is tpl and tpl.func is second and first.func is not second


# ---- the tuner registry ---------------------------------------------------------------------

def test_every_tuner_name_makes_its_class_and_is_public():
    task = create_task("test_matmul", (16, 16, 16))
    assert list(TUNERS) == ["gbt", "ga", "sa", "random", "grid", "optuna"]
    for name, cls in TUNERS.items():
        if name == "optuna":
            pytest.importorskip("optuna")
        t = make_tuner(name, task, seed=3)
        assert type(t) is cls and t.seed == 3
        assert getattr(lt.search, cls.__name__) is cls and cls.__name__ in lt.search.__all__
    assert lt.search.TUNERS is TUNERS and lt.search.make_tuner is make_tuner
    assert lt.search.DagTemplate is DagTemplate
    assert tuner_class(RandomTuner) is RandomTuner
    assert type(make_tuner(GridTuner, task)) is GridTuner


def test_an_unknown_tuner_name_lists_the_choices():
    with pytest.raises(LooptuneError, match=r"^tune: tuner must be one of gbt, ga, sa, random, "
                       r"grid, optuna \(or a Tuner class\); got 'annealing'$"):
        tuner_class("annealing", "tune")
    task = create_task("test_matmul", (16, 16, 16))
    with pytest.raises(LooptuneError, match=r"^tuner must be one of .*; got <class 'int'>$"):
        make_tuner(int, task)


def test_tuner_options_are_checked_against_the_tuner():
    task = create_task("test_matmul", (16, 16, 16))
    with pytest.raises(LooptuneError, match=r"transfer logs warm-start the cost model of the gbt "
                       r"tuner; the 'ga' tuner has none: use tuner 'gbt' or drop the logs"):
        make_tuner("ga", task, transfer_logs=["x.jsonl"])
    with pytest.raises(LooptuneError, match=r"tuner 'sa' takes no option sampler; its options "
                       r"are n_chains, t0, t1, n_trial_hint, seed"):
        make_tuner("sa", task, sampler="tpe")
    assert make_tuner("ga", task, seed=1, pop_size=4).pop_size == 4
    # GBTTuner takes its options as **kwargs: make_tuner reads them off GBTOptions, so the
    # gbt tuner accepts transfer logs and its options, and still refuses an unknown one
    with pytest.raises(LooptuneError, match=r"tuning log x.jsonl does not exist"):
        make_tuner("gbt", task, seed=1, transfer_logs=["x.jsonl"])   # reached the tuner
    assert make_tuner("gbt", task, seed=1, n_init=4).options.n_init == 4
    with pytest.raises(LooptuneError, match=r"tuner 'gbt' takes no option pop_size; its "
                       r"options are options, .*transfer_logs"):
        make_tuner("gbt", task, pop_size=4)
