"""``looptune show FILE --html OUT`` and ``LoweredFunc._repr_html_``: the loop nest with loop
kinds coloured and buffer sizes, one static HTML file, every user name escaped; opened in a
real headless browser (Debian's chromium) whose DOM and screenshot are checked."""
from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.cli import main
from looptune.schedule.nest_html import COLOURS, MAX_LINES, buffer_bytes, html_page, human_bytes
from looptune.schedule.stmt import For, ForKind, StmtVisitor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = str(EXAMPLES / "matmul.py")
HOSTILE = "A<img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path_factory.getbasetemp() / "ltcache"))


class _Loops(StmtVisitor):
    def __init__(self):
        self.loops: list[tuple[str, str]] = []

    def visit_For(self, s: For):
        self.loops.append((s.var.name, s.kind.value))
        self.visit(s.body)


class _Dom(HTMLParser):
    """The loop variables (``<b class="lt-var">``), kinds (``data-kind``), buffer names and
    every element's tag, as a browser serialised them."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.kinds: list[str] = []
        self.vars: list[str] = []
        self.bufs: list[str] = []
        self._grab: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "data-kind" in a:
            self.kinds.append(a["data-kind"])
        cls = a.get("class") or ""
        self._grab = self.vars if cls == "lt-var" else self.bufs if cls == "lt-buf" else None

    def handle_endtag(self, tag):
        self._grab = None

    def handle_data(self, data):
        if self._grab is not None:
            self._grab.append(data)


def _hostile_func():
    A = lt.placeholder((13, 7), "float32", name=HOSTILE)
    k = lt.reduce_axis(7, name="k</b><script>alert(2)</script>")
    C = lt.compute((13,), lambda i: lt.sum(A[i, k] * 2.0, axis=k), name='C"&<i>')
    s = lt.create_schedule(C)
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    s[C].parallel(io)
    s[C].unroll(ii)
    return s, [A, C]


def test_fragment_escapes_every_user_name_and_colours_each_loop_kind():
    s, args = _hostile_func()
    f = lt.lower(s, args, name="f_<u>", unroll=False)
    page = f._repr_html_()
    assert "<img" not in page and "<script>" not in page and "<u>" not in page
    assert "A&lt;img src=x onerror=alert(1)&gt;" in page and "C&quot;&amp;&lt;i&gt;" in page
    dom = _Dom()
    dom.feed(page)
    assert "script" not in dom.tags and "img" not in dom.tags
    walk = _Loops()
    walk.visit(f.body)
    assert dom.vars == [name for name, _ in walk.loops]
    assert dom.kinds == [kind for _, kind in walk.loops] == ["parallel", "unrolled", "serial"]
    assert dom.bufs == [HOSTILE, 'C"&<i>']
    for kind in ("parallel", "unrolled", "serial"):
        bar = COLOURS[ForKind(kind)][0]
        assert f".lt-{kind}{{border-color:{bar}" in page


def test_buffer_sizes_and_the_line_cap(monkeypatch):
    A = lt.placeholder((1001, 3), "float64", name="A")
    B = lt.compute((1001, 3), lambda i, j: A[i, j] + 1.0, name="B")
    s = lt.create_schedule(B)
    f = lt.lower(s, [A, B])
    assert buffer_bytes(f.buffers[0]) == 1001 * 3 * 8
    assert human_bytes(24024) == "23.5 KiB" and human_bytes(512) == "512 B"
    assert human_bytes(None) == "symbolic" and human_bytes(3 << 30) == "3.0 GiB"
    assert "23.5 KiB" in html_page(f)
    n = lt.var("n")
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.compute((n,), lambda i: X[i] * 2.0, name="Y")
    page = html_page(lt.lower(lt.create_schedule(Y), [X, Y]))
    assert "<td>[n]</td>" in page and "symbolic" in page
    monkeypatch.setattr("looptune.schedule.nest_html.MAX_LINES", 1)
    capped = html_page(f)
    assert "more lines not shown" in capped and MAX_LINES > 1


@pytest.mark.slow
def test_show_html_differs_only_in_form_from_the_text_nest(tmp_path, capsys):
    out = tmp_path / "nest.html"
    assert main(["show", MATMUL, "--args", "67,45,33", "--html", str(out)]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    assert main(["show", MATMUL, "--args", "67,45,33", "--html", "-"]) == 0
    assert capsys.readouterr().out == page
    # the page shows the schedule the text view shows, and that schedule is right
    from looptune.operators import load_operators
    op = load_operators(MATMUL)[0]
    s, tensors = op.hand_schedule(67, 45, 33)
    f = lt.build(s, tensors)
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, sh).astype("float32") for sh in ((67, 33), (33, 45)))
    c = np.empty((67, 45), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_show_html_errors(tmp_path, capsys):
    assert main(["show", MATMUL, "--html", str(tmp_path / "no" / "x.html")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"looptune show: error: cannot write {tmp_path}/no/x.html: the folder "
        f"{tmp_path}/no does not exist")
    assert main(["show", MATMUL, "--html", str(tmp_path), "--args", "8,8,8"]) == 2
    assert "it is a folder" in capsys.readouterr().err
    assert main(["show", MATMUL, "--html", "x.html", "--source"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless browser: install Debian's chromium (apt-get install chromium; "
                ".ci/run does so when root) to open the HTML loop nest in a real browser")


def _browser(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", *flags]
    if os.geteuid() == 0:
        cmd.insert(2, "--no-sandbox")          # chromium refuses to run as root otherwise
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_a_real_browser_shows_the_loop_names_and_colours(tmp_path):
    chromium = _chromium()
    page = tmp_path / "nest.html"
    assert main(["show", MATMUL, "--args", "67,45,33", "--html", str(page)]) == 0
    dump = _browser(tmp_path, "--dump-dom", page.as_uri())
    assert dump.returncode == 0, (chromium, dump.stderr[-2000:])
    dom = _Dom()
    dom.feed(dump.stdout)
    from looptune.operators import load_operators
    s, tensors = load_operators(MATMUL)[0].hand_schedule(67, 45, 33)
    walk = _Loops()
    walk.visit(lt.lower(s, tensors, unroll=False).body)
    assert dom.vars == [n for n, _ in walk.loops] and len(dom.vars) > 5
    assert set(dom.kinds) >= {"parallel", "vectorized", "unrolled", "serial"}
    assert dom.bufs[:3] == ["A", "B", "C"]
    shot = tmp_path / "nest.png"
    run = _browser(tmp_path, f"--screenshot={shot}", "--window-size=1200,1000", page.as_uri())
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    from PIL import Image
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    for kind in ("parallel", "vectorized", "unrolled", "serial"):
        bar = COLOURS[ForKind(kind)][0]
        rgb = [int(bar[k:k + 2], 16) for k in (1, 3, 5)]
        assert (np.abs(pixels.astype(int) - rgb).max(axis=1) <= 2).sum() > 200, kind


@pytest.mark.slow
def test_a_real_browser_runs_no_script_from_a_hostile_name(tmp_path):
    s, args = _hostile_func()
    page = tmp_path / "hostile.html"
    page.write_text(html_page(lt.lower(s, args, name="f_<u>", unroll=False)))
    dump = _browser(tmp_path, "--dump-dom", page.as_uri())
    assert dump.returncode == 0, dump.stderr[-2000:]
    dom = _Dom()
    dom.feed(dump.stdout)
    assert "script" not in dom.tags and "img" not in dom.tags and "u" not in dom.tags
    assert dom.bufs == [HOSTILE, 'C"&<i>']
    assert dom.vars[1] == "i.inner" and "k</b><script>alert(2)</script>" in dom.vars
