"""``looptune graph MODEL``: each path of the command, and each error (exit 2, one line)."""
from __future__ import annotations

import os
import sys

import pytest

onnx = pytest.importorskip("onnx")
import models
from looptune.cli import main
from looptune.graph import cli as graph_cli
from onnx import TensorProto as T
from onnx import helper


@pytest.fixture(scope="module")
def residual_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "residual.onnx"
    onnx.save(models.residual(), str(p))
    return str(p)


def _save(tmp_path, nodes, inputs, outputs, name="m.onnx"):
    g = helper.make_graph(nodes, "m", inputs, outputs)
    p = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return str(p)


@pytest.fixture
def symbolic_path(tmp_path):
    return _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                 [helper.make_tensor_value_info("x", T.FLOAT, ["N", 5])],
                 [helper.make_tensor_value_info("y", T.FLOAT, ["N", 5])])


def test_prints_graph_pipeline_and_groups(residual_path, capsys):
    assert main(["graph", residual_path]) == 0
    out = capsys.readouterr().out
    assert "graph 'residual', 7 nodes, 1 input(s)" in out
    assert "= Conv(%x, %conv1.weight, %conv1.bias" in out            # the graph as imported
    assert "== after the pipeline (fold_constants, " in out and "== fused groups:" in out
    assert "fused_conv" in out and "OUT_ELEMWISE_FUSABLE" in out
    assert "== passes" not in out


def test_passes_prints_what_each_pass_did(residual_path, capsys):
    assert main(["graph", residual_path, "--passes"]) == 0
    out = capsys.readouterr().out
    section = out.split("== passes")[1].split("== fused groups")[0]
    assert "->" in section and len(section.strip().splitlines()) >= 2


def test_dot_writes_clusters(residual_path, tmp_path, capsys):
    dot = tmp_path / "r.dot"
    assert main(["graph", residual_path, "--dot", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith('digraph "residual"') and "subgraph cluster_0" in text
    assert f"wrote {dot}" in capsys.readouterr().out


def test_png_with_matplotlib(residual_path, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(graph_cli, "have_dot", lambda: False)
    png = tmp_path / "r.png"
    assert main(["graph", residual_path, "--png", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {png} (matplotlib)" in capsys.readouterr().out


def _fake_dot(tmp_path, monkeypatch, body: str):
    """A `dot` on the PATH that runs ``body`` (sh) with its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_png_with_graphviz(residual_path, tmp_path, monkeypatch, capsys):
    _fake_dot(tmp_path, monkeypatch, 'cat > "$3"\n')      # dot -Tpng -o FILE < DOT
    png = tmp_path / "r.png"
    assert main(["graph", residual_path, "--png", str(png)]) == 0
    assert png.read_text().startswith('digraph "residual"')
    assert f"wrote {png} (graphviz dot)" in capsys.readouterr().out


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("looptune graph: error: "), err
    return lines[0]


def test_png_without_any_renderer(residual_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(graph_cli, "have_dot", lambda: False)
    monkeypatch.setattr(graph_cli, "have_matplotlib", lambda: False)
    assert main(["graph", residual_path, "--png", str(tmp_path / "r.png")]) == 2
    assert "--png: needs Graphviz (the `dot` program) or matplotlib (pip install " \
        "looptune[plot]); neither is installed: write --dot FILE instead" in _error_line(capsys)


def test_png_when_dot_fails(residual_path, tmp_path, monkeypatch, capsys):
    _fake_dot(tmp_path, monkeypatch, 'echo "syntax error in line 1" >&2\nexit 1\n')
    assert main(["graph", residual_path, "--png", str(tmp_path / "r.png")]) == 2
    assert "--png: dot failed: syntax error in line 1" in _error_line(capsys)


def test_shape_fixes_a_symbolic_input(symbolic_path, capsys):
    assert main(["graph", symbolic_path, "--shape", "x=2,5"]) == 0
    assert "%x: float32[2, 5]" in capsys.readouterr().out


def _unsupported(tmp_path):
    return _save(tmp_path, [helper.make_node("NonZero", ["x"], ["a"]),
                            helper.make_node("TopK", ["x", "k"], ["y", "i"])],
                 [helper.make_tensor_value_info("x", T.FLOAT, [4]),
                  helper.make_tensor_value_info("k", T.INT64, [1])],
                 [helper.make_tensor_value_info("y", T.FLOAT, None)])


@pytest.mark.parametrize("args, match", [
    (lambda p, s, t: [str(t / "nope.onnx")], r"no such file: .*nope\.onnx"),
    (lambda p, s, t: [str(_garbage(t))], r"garbage\.onnx is not a readable ONNX model"),
    (lambda p, s, t: [_unsupported(t)],
     r"the model uses 2 operator type\(s\) looptune does not support: NonZero \(1\), TopK \(1\)"),
    (lambda p, s, t: [s], (r"input 'x' has a symbolic dimension 'N' .* \(on the command line: "
                           r"--shape NAME=D,D,\.\.\.\)")),
    (lambda p, s, t: [s, "--shape", "x=2,a"], (r"--shape: expected NAME=D,D,\.\.\. with "
                                               r"positive sizes \(e\.g\. x=1,3,224,224\); got "
                                               r"'x=2,a'")),
    (lambda p, s, t: [s, "--shape", "x=0,5"], r"--shape: expected NAME=D,D,\.\.\."),
    (lambda p, s, t: [s, "--shape", "x=2,5", "--shape", "x=3,5"],
     r"--shape: input 'x' is given twice"),
    (lambda p, s, t: [s, "--shape", "z=2,5"], r"shapes= names z, which the model does not take"),
    (lambda p, s, t: [s, "--shape", "x=2,5,1"], r"input 'x': shapes= gives rank 3"),
    (lambda p, s, t: [p, "--dot", str(t / "no" / "x.dot")],
     r"--dot: cannot write .*x\.dot: the folder .*no does not exist"),
    (lambda p, s, t: [p, "--png", str(t)], r"--png: cannot write .*: it is a folder"),
])
def test_errors_are_one_line_with_exit_2(args, match, residual_path, symbolic_path, tmp_path,
                                         capsys):
    assert main(["graph", *args(residual_path, symbolic_path, tmp_path)]) == 2
    import re
    assert re.search(match, _error_line(capsys))


def _garbage(tmp_path):
    p = tmp_path / "garbage.onnx"
    p.write_bytes(b"\x00\xffnot a protobuf")
    return p


def test_without_onnx_says_what_to_install(residual_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)
    assert main(["graph", residual_path]) == 2
    assert "the onnx package is not installed; install it with `pip install looptune[onnx]`" \
        in _error_line(capsys)
