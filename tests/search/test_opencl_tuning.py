"""Tasks with target='opencl' tune like C tasks; the log's best config applies and is exact."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt

pytestmark = pytest.mark.opencl


@pytest.mark.slow
def test_tune_an_opencl_template(opencl, tmp_path):
    import helpers_cl_template as h
    task = lt.search.create_task(h.NAME, (24, 40, 16), target="opencl")
    assert len(task.config_space) == 6
    log = tmp_path / "cl.jsonl"
    best = lt.search.GridTuner(task).tune(
        6, lt.search.MeasureOption(number=1, repeat=2, timeout=30, n_parallel=2,
                                    remeasure_top=0),
        callbacks=[lt.search.log_to_file(log)])
    recs = lt.search.load_records(log)
    assert all(r.ok for r in recs), [r.error_msg for r in recs]
    assert len([r for r in recs if r.kind == "measure"]) == 6     # the others: races
    assert all(r.task.target.startswith("opencl") for r in recs)
    assert best.config.index == lt.search.load_best(log, task).index
    with lt.search.apply_history_best(log):
        s, tensors = h.template(24, 40, 16)
    f = lt.build(s, tensors, target="opencl")
    rng = np.random.default_rng(0)
    a, b = rng.random((24, 16), np.float32), rng.random((16, 40), np.float32)
    c = np.empty((24, 40), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
