"""Templates that no worker process can import (a notebook cell, ``python -c``, a closure)
are sent to the measurement workers by value with cloudpickle; the errors say what to do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import looptune as lt
import numpy as np
import pytest
from looptune.errors import LooptuneError
from looptune.search import create_task, template
from looptune.search.task import task_from_spec
from looptune.search.template import get_template, template_from_pickle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A template defined in `python -c` (module __main__, file "<string>"), tuned with two builder
# workers, then applied and checked against numpy at an odd size.
TUNE_SCRIPT = r'''
import json, sys
import numpy as np
import looptune as lt
from looptune import search

OFFSET = 0.25                      # a global of the script: sent along by value

def body(A, i):                    # a helper of the script: sent along too
    return A[i] * 3.0 + OFFSET

@lt.template("pickled_scale")
def scale(cfg, n):
    A = lt.placeholder((n,), "float32", name="A")
    B = lt.compute((n,), lambda i: body(A, i), name="B")
    s = lt.create_schedule(B)
    (i,) = s[B].op.axis
    cfg.define_split("t", i, num_outputs=2)
    io, ii = cfg["t"].apply(s, B, i)
    cfg.define_knob("vec", [0, 1])
    if cfg["vec"].val:
        s[B].vectorize(ii)
    return s, [A, B]

log = sys.argv[1]
task = search.create_task("pickled_scale", (999,))
tuner = search.RandomTuner(task, seed=0)
tuner.tune(6, search.MeasureOption(n_parallel=2, remeasure_top=0, noise_threshold=None),
           callbacks=[search.log_to_file(log)])
with search.apply_history_best(log):
    s, (A, B) = scale(999)
f = lt.build(s, [A, B])
a = np.random.default_rng(1).uniform(-1, 1, 999).astype("float32")
b = np.empty_like(a)
f(a, b)
np.testing.assert_allclose(b, a * 3.0 + 0.25, rtol=1e-6, atol=1e-6)
print(json.dumps([r.error_kind.value for r in tuner.history]))
'''


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


@pytest.mark.slow
def test_a_python_c_template_tunes_with_two_workers(tmp_path):
    log = tmp_path / "c.jsonl"
    p = subprocess.run([sys.executable, "-c", TUNE_SCRIPT, str(log)], cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=300,
                       check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    kinds = json.loads(p.stdout.strip().splitlines()[-1])
    assert kinds == ["none"] * 6, p.stderr[-3000:]
    recs = lt.search.load_records(str(log))
    assert all(r.ok for r in recs)
    assert len([r for r in recs if r.kind == "measure"]) == 6     # the others: races


def test_a_notebook_cell_template_is_sent_by_value(tmp_path):
    """As Jupyter runs a cell: code compiled with a file name that does not exist, run in
    __main__. The worker-side task rebuilt from the spec instantiates the same loop nest."""
    cell = ("import looptune as lt\n"
            "@lt.template('pickled_cell')\n"
            "def cell(cfg, n):\n"
            "    A = lt.placeholder((n, 3), 'float32', name='A')\n"
            "    B = lt.compute((n, 3), lambda i, j: A[i, j] - 1.0, name='B')\n"
            "    s = lt.create_schedule(B)\n"
            "    cfg.define_split('t', s[B].op.axis[0], num_outputs=2)\n"
            "    cfg['t'].apply(s, B, s[B].op.axis[0])\n"
            "    return s, [A, B]\n")
    script = (
        "import json, pickle, sys, subprocess\n"
        f"exec(compile({cell!r}, '/tmp/ipykernel_0/does_not_exist_7.py', 'exec'))\n"
        "from looptune.search import create_task\n"
        "t = create_task('pickled_cell', (45,))\n"
        "spec = t.spec()\n"
        "assert 'pickled' in spec and not t.template.importable, spec\n"
        "sys.stdout.buffer.write(pickle.dumps((spec, str(lt.lower(*t.instantiate(5))))))\n")
    p = subprocess.run([sys.executable, "-c", script], env=_env(),
                       capture_output=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    import pickle
    spec, nest = pickle.loads(p.stdout)
    spec = dict(spec, name="pickled_cell_here")        # not registered in this process
    task = task_from_spec(spec)
    assert task.template.func.__name__ == "cell"
    assert str(lt.lower(*task.instantiate(5))) == nest
    assert get_template("pickled_cell_here") is task.template


def test_a_closure_template_is_not_importable_and_round_trips():
    k = 5.0

    @template("pickled_closure")
    def closure(cfg, n):
        A = lt.placeholder((n,), "float32", name="A")
        B = lt.compute((n,), lambda i: A[i] * k, name="B")
        s = lt.create_schedule(B)
        cfg.define_knob("unroll", [0, 1])
        return s, [A, B]

    task = create_task("pickled_closure", (13,))
    assert not task.template.importable
    spec = task.spec()
    tpl = template_from_pickle("pickled_closure_copy", spec["pickled"])
    s, (A, B) = tpl.func(lt.search.FallbackConfig(), 13)
    f = lt.build(s, [A, B])
    a = np.arange(13, dtype="float32")
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a * 5.0)


def test_importable_templates_are_sent_by_name():
    task = create_task("test_matmul", (8, 8, 8))
    assert task.template.importable
    spec = task.spec()
    assert "pickled" not in spec and spec["module"] == "helpers_templates"


def test_without_cloudpickle_the_error_says_what_to_do(monkeypatch):
    @template("pickled_no_cp")
    def t(cfg, n):
        A = lt.placeholder((n,), "float32", name="A")
        B = lt.compute((n,), lambda i: A[i], name="B")
        return lt.create_schedule(B), [A, B]

    task = create_task("pickled_no_cp", (4,))
    monkeypatch.setitem(sys.modules, "cloudpickle", None)        # import fails
    with pytest.raises(LooptuneError, match=r"template 'pickled_no_cp' is defined inside a "
                       r"function .* worker processes cannot import; install cloudpickle "
                       r"\(pip install cloudpickle\) .* or move it into a module or script"):
        task.spec()


def test_a_template_that_does_not_pickle_names_the_reason():
    lock = threading.Lock()

    @template("pickled_lock")
    def t(cfg, n):
        with lock:
            A = lt.placeholder((n,), "float32", name="A")
            B = lt.compute((n,), lambda i: A[i], name="B")
        return lt.create_schedule(B), [A, B]

    task = create_task("pickled_lock", (4,))
    with pytest.raises(LooptuneError, match=r"template 'pickled_lock' .* sent to the "
                       r"measurement workers by value, but cloudpickle cannot pickle it: "
                       r"TypeError: .*lock"):
        task.spec()


def test_bytes_that_do_not_unpickle_in_the_worker():
    with pytest.raises(LooptuneError, match=r"template 'broken' was sent to this worker by "
                       r"value but does not unpickle here: .* move it into a module"):
        template_from_pickle("broken", b"not a pickle")
