"""looptune.graph.zoo: the model builders and their command line."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("onnx")

import looptune as lt  # noqa: E402
from looptune.graph import zoo  # noqa: E402


def test_cnn_sizes_are_parameters():
    g = lt.graph.from_onnx(zoo.cnn(batch=3, size=8, channels=(4, 6, 5)))
    assert g.types["x"].shape == (3, 3, 8, 8)
    convs = [g.types[n.inputs[1]].shape for n in g.nodes if n.op_type == "Conv"]
    assert [c[0] for c in convs] == [4, 6, 5]


def test_command_writes_a_model_that_imports(tmp_path):
    out = tmp_path / "m.onnx"
    proc = subprocess.run([sys.executable, "-m", "looptune.graph.zoo", "residual", "-o",
                           str(out), "--batch", "1"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout
    g = lt.graph.from_onnx(str(out))
    assert g.types["x"].shape[0] == 1 and [n.op_type for n in g.nodes].count("Conv") == 2


def test_command_refuses_an_unknown_model(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "looptune.graph.zoo", "vgg", "-o",
                           str(tmp_path / "x.onnx")], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'vgg'" in proc.stderr
