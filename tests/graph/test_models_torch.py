"""benchmarks/models_torch.py: the torch twins of benchmarks/models.py's four models match ONNX
Runtime (small, odd sizes), a twin refuses a model it does not mirror, and the torch workers
run inside bench_model's rounds (a failed torch.compile or an output off is the row's error)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import models  # tests/graph/models.py: the ONNX test models
import numpy as np
import onnx
import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("could not import 'torch': it is not installed", allow_module_level=True)
pytest.importorskip("onnxruntime")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
# imported by _torch below, when a test here runs: importing torch takes ~2 s, which every
# xdist worker paid while collecting the suite (and the fast loop's workers at its start)
torch = models_torch = torch_twins = None


@pytest.fixture(scope="module", autouse=True)
def _torch():
    global torch, models_torch, torch_twins
    torch = pytest.importorskip("torch")
    import models_torch as mt  # benchmarks/models_torch.py
    import torch_twins as tt  # benchmarks/torch_twins.py
    models_torch, torch_twins = mt, tt


def _bench_models():
    """benchmarks/models.py, under another name than tests/graph/models.py's."""
    spec = importlib.util.spec_from_file_location("bench_models", BENCH / "models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SMALL = {
    "cnn": lambda: models.cnn(batch=2, size=13, channels=(5, 7, 3)),
    "resnet_stage": lambda: models.residual(batch=2, channels=5, size=9),
    "mlp": lambda: _bench_models().mlp(batch=3, d=37, hidden=53),
    "transformer": lambda: models.transformer(batch=2, seq=7, d=20, heads=4, ffn=36),
}


def _saved(tmp_path, proto) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(proto, path)
    return path


def test_every_benchmark_model_has_a_twin():
    assert set(_bench_models().MODELS) == set(torch_twins.TWINS) == set(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_twin_matches_onnxruntime(tmp_path, name):
    proto = SMALL[name]()
    inputs = models.random_inputs(proto, seed=3)
    ref = models_torch.reference(_saved(tmp_path, proto), inputs, threads=1)
    module = torch_twins.build(name, proto)
    with torch.inference_mode():
        out = module(*[torch.from_numpy(a) for a in inputs.values()])
    assert out.shape == ref[0].shape
    assert models_torch.rel_diff([out.numpy()], ref) <= models_torch.RTOL
    assert not any(p.requires_grad for p in module.parameters())


def test_twin_refuses_another_model():
    with pytest.raises(torch_twins.TwinError,
                       match=r"twin of cnn: the ONNX graph's op 0 .* is MatMul \(/attn.q/MatMul"
                             r"\), the twin expects Conv"):
        torch_twins.build("cnn", models.transformer(batch=1, seq=4, d=8, heads=2, ffn=8))
    with pytest.raises(torch_twins.TwinError, match=r"op 2 .* is the end, the twin expects Gemm"):
        torch_twins.build("mlp", _truncated(_bench_models().mlp(batch=2, d=8, hidden=8)))
    with pytest.raises(torch_twins.TwinError, match="no torch twin for model 'vgg'; choose"):
        torch_twins.build("vgg", models.residual())


def _truncated(proto):
    del proto.graph.node[-1]
    return proto


def test_twin_refuses_attributes_it_does_not_mirror():
    mlp = _bench_models().mlp(batch=2, d=8, hidden=8)
    mlp.graph.node[0].attribute[0].i = 0                       # transB=0
    with pytest.raises(torch_twins.TwinError, match=r"Gemm .* \(transA, transB, alpha, beta\)"
                                                    r" \(0, 0, 1.0, 1.0\)"):
        torch_twins.build("mlp", mlp)
    res = models.residual()
    pads = next(a for a in res.graph.node if a.op_type == "Conv").attribute
    next(a for a in pads if a.name == "pads").ints[:] = [1, 1, 0, 0]
    with pytest.raises(torch_twins.TwinError, match=r"Conv '/conv1/Conv' has asymmetric pads"):
        torch_twins.build("resnet_stage", res)


def _spec(tmp_path, name, proto, inputs, **kw) -> dict:
    path = _saved(tmp_path, proto)
    extra = models_torch.extra_systems(name, path, inputs, tmp_path, threads=1, **kw)
    return extra


def test_prepare_checks_against_the_reference(tmp_path):
    proto = SMALL["resnet_stage"]()
    inputs = models.random_inputs(proto)
    extra = _spec(tmp_path, "resnet_stage", proto, inputs)
    spec = extra[models_torch.EAGER][1]
    with torch.inference_mode():
        (out,) = models_torch.prepare(spec, inputs)()
    assert models_torch.rel_diff([out.numpy()], np.load(spec["reference"])["arr_0"][None]) < 1e-6
    np.savez(spec["reference"], np.load(spec["reference"])["arr_0"] * 1.01)
    with torch.inference_mode(), pytest.raises(
            models_torch.WorkerError, match=r"torch eager outputs differ from onnxruntime's by "
                                            r"0.0099\d* .*limit 0.0001\): not timed"):
        models_torch.prepare(spec, inputs)


@pytest.mark.slow
def test_prepare_reports_a_failed_compile(tmp_path):
    proto = SMALL["mlp"]()
    inputs = models.random_inputs(proto)
    spec = _spec(tmp_path, "mlp", proto, inputs,
                 backend="no_such_backend")[models_torch.COMPILE][1]
    with torch.inference_mode(), pytest.raises(models_torch.WorkerError,
                                               match=r"^torch.compile failed: \w+: .*backend"):
        models_torch.prepare(spec, inputs)


def test_cells():
    row = {"onnxruntime_ms": 2.0, "torch eager_ms": 1.0,
           "errors": {"torch.compile": "torch.compile failed: X: no | compiler"}}
    assert models_torch.cells(row) == "1.000 (0.50x) | torch.compile failed: X: no / compiler |"


def test_cells_without_torch(monkeypatch):
    monkeypatch.setattr(models_torch, "available", lambda: False)
    assert models_torch.cells({}) == "torch not installed | torch not installed |"
    assert models_torch.extra_systems("cnn", "x.onnx", {}, ".", threads=1) == {}
    assert "not installed" in models_torch.note()


def _bench(tmp_path, backend: str):
    import looptune as lt
    from looptune.graph.model_bench import ORT, bench_model
    proto = models.residual(batch=1, channels=4, size=6)
    path = _saved(tmp_path, proto)
    inputs = models.random_inputs(proto)
    model = lt.graph.compile(lt.graph.from_onnx(path))
    extra = models_torch.extra_systems("resnet_stage", path, inputs, tmp_path, threads=1,
                                       backend=backend)
    return bench_model(path, model, inputs, rounds=2, threads=1, min_block=0.02,
                       systems=(ORT,), kernels=False, extra=extra)


@pytest.mark.slow
def test_bench_model_times_the_torch_workers(tmp_path):
    res = _bench(tmp_path, "inductor")
    assert list(res.systems) == ["onnxruntime", "torch eager", "torch.compile"]
    assert res.errors == {}
    for s in res.systems.values():
        assert len(s.times) == 2 and all(t > 0 for t in s.times) and s.rss_growth is not None
    assert "torch.compile" in res.table()


@pytest.mark.slow
def test_bench_model_carries_a_failed_compile_as_the_rows_error(tmp_path):
    res = _bench(tmp_path, "no_such_backend")
    assert list(res.systems) == ["onnxruntime", "torch eager"]
    assert list(res.errors) == ["torch.compile"]
    assert res.errors["torch.compile"].startswith("torch.compile failed: ")
    assert "torch.compile        not timed: torch.compile failed" in res.table()
