"""GBTTuner(transfer_logs=...) from Python: another template that raises something other than
a LooptuneError on some of its logged configs (or cannot be instantiated at all) costs those
records, with one warning per task, never the tuner."""
from __future__ import annotations

import logging

import looptune as lt
import pytest
from helpers_templates import matmul_tensors
from looptune.search import create_task, template
from looptune.search.gbt_tuner import GBTTuner
from looptune.search.log import LogWriter, Record


@template("test_xfer_picky")
def picky(cfg, N, M, K):
    """A matmul whose template raises a plain ValueError for unroll 4 and 16, and a
    ZeroDivisionError for every config when K == 3."""
    A, B, C = matmul_tensors(N, M, K)
    s = lt.create_schedule(C)
    _, j = s[C].op.axis
    cfg.define_knob("unroll", [0, 2, 4, 8, 16, 32])
    cfg.define_split("tile_j", j, num_outputs=2)
    if K == 3:
        _ = 1 / (K - 3)
    if cfg["unroll"].val in (4, 16):
        raise ValueError(f"picky: unroll {cfg['unroll'].val} is not supported")
    _, ji = cfg["tile_j"].apply(s, C, j)
    s[C].vectorize(ji)
    return s, [A, B, C]


def _log_every_config(path, task, fake_key=None) -> int:
    with LogWriter(path) as w:
        for i in range(task.config_space.size):
            cfg = task.config_space.get(i).to_json()
            w.write(Record(fake_key or task.key, cfg, costs=[1e-4 * (1 + i % 7)],
                           flop=float(task.flop or 1)))
    return task.config_space.size


def test_transfer_skips_configs_whose_template_raises_with_one_warning(tmp_path, caplog):
    other = create_task("test_xfer_picky", (12, 16, 8))
    n = _log_every_config(tmp_path / "other.jsonl", other)
    bad = sum(other.config_space.get(i).knob_values()["unroll"] in (4, 16) for i in range(n))
    assert 0 < bad < n
    task = create_task("test_xfer_picky", (10, 16, 8))
    with caplog.at_level(logging.WARNING, logger="looptune.search.transfer"):
        t = GBTTuner(task, seed=0, transfer_logs=[tmp_path / "other.jsonl"], max_transfer=1000)
    assert t.n_transferred == n - bad
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert f"transfer skips {bad} configs of test_xfer_picky(12, 16, 8)" in warnings[0]
    assert "ValueError: picky: unroll" in warnings[0]


def test_transfer_skips_a_task_whose_template_cannot_be_instantiated(tmp_path, caplog):
    good = create_task("test_xfer_picky", (12, 16, 8))
    _log_every_config(tmp_path / "mixed.jsonl", good)
    broken_key = good.key._replace(args=(12, 16, 3))        # the template divides by zero
    _log_every_config(tmp_path / "mixed.jsonl", good, fake_key=broken_key)
    task = create_task("test_xfer_picky", (10, 16, 8))
    with caplog.at_level(logging.WARNING, logger="looptune.search.transfer"):
        t = GBTTuner(task, seed=0, transfer_logs=[tmp_path / "mixed.jsonl"], max_transfer=1000)
    msgs = [r.getMessage() for r in caplog.records]
    assert any("cannot use the records of test_xfer_picky(12, 16, 3)" in m
               and "ZeroDivisionError" in m for m in msgs), msgs
    assert t.n_transferred > 0                      # the good task's records still count


def test_transfer_from_only_unusable_records_is_no_transfer(tmp_path):
    good = create_task("test_xfer_picky", (12, 16, 8))
    _log_every_config(tmp_path / "bad.jsonl", good,
                      fake_key=good.key._replace(args=(12, 16, 3)))
    t = GBTTuner(create_task("test_xfer_picky", (10, 16, 8)), seed=0,
                 transfer_logs=[tmp_path / "bad.jsonl"])
    assert t.n_transferred == 0 and t.active == "target"


@pytest.mark.parametrize("args", [(12, 16, 8)])
def test_a_skipped_config_is_really_one_the_template_rejects(args):
    task = create_task("test_xfer_picky", args)
    ok = [i for i in range(task.config_space.size)
          if task.config_space.get(i).knob_values()["unroll"] not in (4, 16)]
    task.instantiate(ok[0])
    bad = next(i for i in range(task.config_space.size) if i not in ok)
    with pytest.raises(ValueError, match="picky: unroll"):
        task.instantiate(bad)
