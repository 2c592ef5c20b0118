"""``looptune report LOG... -o curve.png``: every trial, failures marked, the best so far, the
chosen best, the hand schedule and numpy as baselines, axes from zero, target and host in the
title, several logs overlaid. The mechanism is checked (artists, limits, labels), not pixels."""
from __future__ import annotations

from pathlib import Path

import looptune.report_plot as rp
import matplotlib
import pytest
from looptune.cli import main
from looptune.operators import CLIError, load_operators
from looptune.search import LogWriter, MeasureResult, Record, create_task
from looptune.search.hosts import describe_host, host_info
from looptune.search.measure import ErrorKind
from matplotlib.collections import PathCollection

matplotlib.use("Agg")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = str(EXAMPLES / "matmul.py")
T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path_factory.getbasetemp() / "ltcache"))


@pytest.fixture(scope="module")
def task():
    load_operators(MATMUL)
    return create_task("matmul", (48, 40, 24))


def _rec(task, index, costs, t, error="none", kind="measure", flop=True):
    res = MeasureResult(task.config_space.get(index), list(costs), ErrorKind(error),
                        timestamp=T0 + t, flop=task.flop if flop else None, kind=kind)
    return Record.from_result(task.key, res)


def _log(path: Path, recs) -> str:
    with LogWriter(path) as w:
        for r in recs:
            w.write(r)
    return str(path)


def _two_logs(tmp_path, task, flop=True):
    a = [_rec(task, i, [c], i, flop=flop) for i, c in enumerate([4e-4, 2e-4, 3e-4, 1e-4])]
    a.append(_rec(task, 3, [1.5e-4], 9, kind="remeasure", flop=flop))
    b = [_rec(task, 5, [5e-4], 1, flop=flop), _rec(task, 6, [], 2, error="build_error"),
         _rec(task, 7, [2.5e-4], 3, flop=flop), _rec(task, 8, [], 4, error="build_error"),
         _rec(task, 9, [], 5, error="timeout")]
    return _log(tmp_path / "ga.jsonl", a), _log(tmp_path / "random.jsonl", b)


@pytest.fixture
def captured(monkeypatch):
    """The figures ``looptune report`` draws, kept instead of only saved."""
    figs: list = []
    real = rp.save

    def keep(fig, output):
        figs.append(fig)
        real(fig, output)                          # written (and closed) as usual
    monkeypatch.setattr(rp, "save", keep)
    return figs


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_two_logs_overlay_with_failures_best_lines_and_axes_from_zero(tmp_path, task, captured,
                                                                       capsys):
    ga, rnd = _two_logs(tmp_path, task)
    out = tmp_path / "curve.png"
    assert main(["report", ga, rnd, "-o", str(out), "--no-baselines"]) == 0
    assert f"curve written to {out}" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = captured
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
    assert ax.get_ylim()[1] >= task.flop / 1e-4 / 1e9               # the fastest trial shows
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    trials = [c for c in points if c.get_label().endswith(": trials")]
    assert [c.get_label() for c in trials] == ["ga: trials", "random: trials"]
    assert [len(c.get_offsets()) for c in trials] == [4, 2]        # measure records only
    (failed,) = [c for c in points if "failed" in c.get_label()]
    assert failed.get_label() == "random: failed (2 build_error, 1 timeout)"
    assert [tuple(p) for p in failed.get_offsets()] == [(2, 0), (4, 0), (5, 0)]
    best = [ln for ln in ax.get_lines() if "best so far" in ln.get_label()]
    assert len(best) == 2 and best[0].get_drawstyle() == "steps-post"
    assert list(best[0].get_ydata()) == pytest.approx(
        [task.flop / c / 1e9 for c in (4e-4, 2e-4, 2e-4, 1e-4)])
    assert best[0].get_color() != best[1].get_color()             # one colour per log
    stars = [c for c in points if "chosen best" in c.get_label()]
    # config 3: its one re-measure counts, not its search timing (1e-4)
    assert stars[0].get_label() == (f"ga: chosen best (#3, one re-measure): "
                                    f"{task.flop / 1.5e-4 / 1e9:.4g} GFLOP/s")
    assert ax.get_ylabel() == "GFLOP/s (higher is better)"
    title = ax.get_title()
    assert "matmul(48, 40, 24, 'float32') on 'c'" in title
    assert describe_host(host_info("c")) in title


def test_milliseconds_when_flops_are_unknown(task):
    recs = [_rec(task, i, [c], i, flop=False) for i, c in enumerate([3e-3, 1e-3, 2e-3])]
    recs.append(_rec(task, 4, [], 5, error="crash"))
    assert rp.metric_of(recs) == "ms"
    s = rp.series_of("log", task.key, recs, "ms")
    assert rp.best_so_far(s, "ms") == ([1, 2, 3], pytest.approx([3.0, 1.0, 1.0]))
    fig = rp.figure([s], [], {task.key: None}, "ms", rp.title_of([task.key], recs))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "ms per call (lower is better)" and ax.get_ylim()[0] == 0
    (failed,) = [c for c in ax.collections if "failed" in c.get_label()]
    assert failed.get_transform() != ax.transData                # drawn at the axis top
    matplotlib.pyplot.close(fig)


def test_baselines_are_horizontal_lines_that_say_where_they_come_from(task):
    recs = [_rec(task, 0, [2e-4], 0), _rec(task, 1, [1e-4], 1)]
    s = rp.series_of("log", task.key, recs, "gflops")
    bl = [rp.Baseline(task.key, "hand schedule", 5e-5, 0.02, "timed now, median of 5 "
                      "interleaved rounds"),
          rp.Baseline(task.key, "numpy", 4e-5, 0.01, "timed now, median of 5 interleaved "
                      "rounds")]
    fig = rp.figure([s], bl, {task.key: task.flop}, "gflops", "t")
    ax = fig.axes[0]
    hand = [ln for ln in ax.get_lines() if ln.get_label().startswith("hand schedule")]
    numpy = [ln for ln in ax.get_lines() if ln.get_label().startswith("numpy")]
    assert len(hand) == len(numpy) == 1
    assert hand[0].get_linestyle() == "--" and numpy[0].get_linestyle() == ":"
    assert list(hand[0].get_ydata()) == pytest.approx([task.flop / 5e-5 / 1e9] * 2)
    assert "(timed now, median of 5 interleaved rounds)" in hand[0].get_label()
    assert ax.get_ylim()[1] >= task.flop / 4e-5 / 1e9              # the baselines show
    assert any(t.startswith("numpy: ") for t in _legend(ax))
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_report_times_the_hand_schedule_and_numpy_of_the_bundled_example(tmp_path, task,
                                                                         captured, capsys):
    ga, _ = _two_logs(tmp_path, task)
    assert main(["report", ga, "-o", str(tmp_path / "c.png"), "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "timed now, median of 2 interleaved" in ln]
    assert [ln.split(": ")[1].split()[0] for ln in lines] == ["hand", "numpy"]
    ax = captured[0].axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert sum(lb.startswith(("hand schedule: ", "numpy: ")) for lb in labels) == 2


@pytest.mark.parametrize("case, note", [
    ("other_host", ("the log was measured on Some Other CPU, -march=elsewhere, this machine "
                    "is")),
    ("no_operator", "no operator file defines template 'matmul' ("),
])
def test_no_baselines_and_the_report_says_why(tmp_path, task, captured, capsys, case, note):
    recs = [_rec(task, 0, [2e-4], 0), _rec(task, 1, [1e-4], 1)]
    argv = []
    if case == "other_host":
        for r in recs:
            r.host = {"cpu": "Some Other CPU", "march": "elsewhere"}
    else:
        argv = ["--op", str(EXAMPLES / "softmax.py")]
    log = _log(tmp_path / "x.jsonl", recs)
    assert main(["report", log, "-o", str(tmp_path / "c.png"), *argv]) == 0
    out = capsys.readouterr().out
    assert "(no baselines for matmul(48, 40, 24, 'float32'): " + note in out
    labels = [ln.get_label() for ln in captured[0].axes[0].get_lines()]
    assert not any(lb.startswith(("hand", "numpy")) for lb in labels)


def test_find_operator_reads_only_examples_that_name_the_template():
    op = rp.find_operator("softmax", [])
    assert op is not None and op.name == "softmax" and op.file.endswith("softmax.py")
    assert rp.find_operator("no_such_template_here", []) is None


def test_a_png_that_cannot_be_written_is_one_line(tmp_path, task, capsys):
    ga, _ = _two_logs(tmp_path, task)
    bad = tmp_path / "no" / "c.png"
    assert main(["report", ga, "-o", str(bad), "--no-baselines"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"looptune report: error: cannot write {bad}: the folder {bad.parent} does not exist")
    with pytest.raises(CLIError, match="cannot write"):
        rp.save(rp.figure([], [], {}, "gflops", "t"), str(tmp_path))   # a folder
