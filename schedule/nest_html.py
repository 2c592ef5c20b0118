"""The loop nest of a LoweredFunc as HTML: loop kinds coloured, every buffer's size.

``looptune show FILE --html OUT.html`` writes :func:`html_page` (one static file: no script,
no external resource); ``lt.lower(...)`` shows :func:`html_fragment` in a notebook
(``LoweredFunc._repr_html_``). Loops are nested ``<details>`` blocks, so a reader folds the
ones they do not care about; each loop's kind (parallel, vectorized, streamed, unrolled,
serial, or a GPU binding) colours its bar. Every name a user wrote (tensors, stages, loops, the function)
and every expression is escaped with ``html.escape``.
"""
from __future__ import annotations

import html
import math

from ..lang import dtype as dt
from ..lang.expr import Const, Expr, Var
from ..lang.printer import expr_str
from .stmt import (
    Allocate,
    Barrier,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Prefetch,
    Seq,
    StmtVisitor,
    Store,
    display_names,
)

MAX_LINES = 4000           # a fully unrolled nest can be huge: the rest is counted, not shown

COLOURS = {                # kind: (bar, tint) -- readable on white, distinct in greyscale too
    ForKind.PARALLEL: ("#d9480f", "#fff4e6"),
    ForKind.VECTORIZED: ("#2b8a3e", "#ebfbee"),
    ForKind.STREAMED: ("#0b7285", "#e3fafc"),
    ForKind.UNROLLED: ("#7048e8", "#f3f0ff"),
    ForKind.SERIAL: ("#868e96", "#f8f9fa"),
    ForKind.THREAD: ("#c2255c", "#fff0f6"),
}

_CSS = """
.lt-nest{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#212529}
.lt-nest h3{font-size:14px;margin:0 0 6px}
.lt-nest table{border-collapse:collapse;margin:4px 0 10px}
.lt-nest th,.lt-nest td{border:1px solid #dee2e6;padding:2px 8px;text-align:left}
.lt-nest td.num{text-align:right}
.lt-legend span{display:inline-block;margin-right:10px;padding:0 6px;
  border-left-style:solid;border-left-width:6px}
.lt-loop{margin:2px 0;border-left-style:solid;border-left-width:6px;padding-left:6px}
.lt-loop>summary{cursor:pointer;list-style:none}
.lt-loop>summary::-webkit-details-marker{display:none}
.lt-kind{font-weight:bold;margin-right:6px}
.lt-body{margin-left:14px}
.lt-stmt{white-space:pre;margin-left:14px}
.lt-alloc{color:#1864ab}
.lt-more{color:#868e96;font-style:italic}
""" + "".join(f".lt-{k.value}{{border-color:{bar};background:{tint}}}\n"
              for k, (bar, tint) in COLOURS.items())


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def buffer_bytes(b: Buffer) -> int | None:
    """The buffer's size in bytes, or None when a dimension is symbolic."""
    dims = [d.value if isinstance(d, Const) else d for d in b.shape]
    if not all(isinstance(d, int) for d in dims):
        return None
    return math.prod(dims) * dt.itemsize(b.dtype)


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; None -> ``"symbolic"``."""
    if n is None:
        return "symbolic"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class _Html(StmtVisitor):
    def __init__(self, names: dict[Var, str]):
        self.names = names
        self.out: list[str] = []
        self.lines = 0
        self.hidden = 0
        self.allocs: list[Buffer] = []

    def x(self, e) -> str:
        return _e(expr_str(e, self.names) if isinstance(e, Expr) else e)

    def line(self, text_html: str, cls: str = "lt-stmt") -> None:
        self.lines += 1
        if self.lines > MAX_LINES:
            self.hidden += 1
            return
        self.out.append(f'<div class="{cls}">{text_html}</div>')

    def visit_For(self, s: For):
        kind = s.kind.value if s.tag is None else f"{s.kind.value} bind({s.tag})"
        mn, ext = self.x(s.min), self.x(s.extent)
        rng = f"[0, {ext})" if mn == "0" else f"[{mn}, {mn} + {ext})"
        self.lines += 1
        if self.lines > MAX_LINES:
            self.hidden += 1
            self.visit(s.body)
            return
        self.out.append(f'<details open class="lt-loop lt-{s.kind.value}" data-kind='
                        f'"{s.kind.value}"><summary><span class="lt-kind">{_e(kind)}</span>'
                        f'for <b class="lt-var">{self.x(s.var)}</b> in {rng}</summary>'
                        '<div class="lt-body">')
        self.visit(s.body)
        self.out.append("</div></details>")

    def visit_Seq(self, s: Seq):
        for x in s.stmts:
            self.visit(x)

    def visit_IfThenElse(self, s: IfThenElse):
        self.line(f"if {self.x(s.cond)}:")
        self.out.append('<div class="lt-body">')
        self.visit(s.then)
        self.out.append("</div>")
        if s.orelse is not None and not (isinstance(s.orelse, Seq) and not s.orelse.stmts):
            self.line("else:")
            self.out.append('<div class="lt-body">')
            self.visit(s.orelse)
            self.out.append("</div>")

    def visit_Store(self, s: Store):
        idx = ", ".join(self.x(i) for i in s.indices)
        self.line(f"{_e(s.buffer.name)}[{idx}] = {self.x(s.value)}")

    def visit_Allocate(self, s: Allocate):
        b = s.buffer
        self.allocs.append(b)
        shape = ", ".join(self.x(d) for d in b.shape)
        self.line(f"allocate <b>{_e(b.name)}</b>: {_e(b.dtype)}[{shape}] in {_e(b.scope)} "
                  f"({_e(human_bytes(buffer_bytes(b)))})", "lt-stmt lt-alloc")
        self.visit(s.body)

    def visit_LetStmt(self, s: LetStmt):
        self.line(f"let {self.x(s.var)} = {self.x(s.value)}")
        self.visit(s.body)

    def visit_Barrier(self, s: Barrier):
        self.line("barrier()")

    def visit_Prefetch(self, s: Prefetch):
        idx = ", ".join(self.x(i) for i in s.indices)
        self.line(f"prefetch {_e(s.buffer.name)}[{idx}] x {self.x(s.count)}")


def _buffer_rows(render: _Html, func) -> str:
    from ..lang.tensor import PlaceholderOp
    roles = {id(b): "input" if isinstance(t.op, PlaceholderOp) else "output"
             for t, b in zip(func.args, func.buffers)}
    rows, seen = [], set()
    for b in list(func.buffers) + render.allocs:
        if b.uid in seen:          # one buffer allocated in several branches (tail guards)
            continue
        seen.add(b.uid)
        shape = ", ".join(render.x(d) for d in b.shape)
        role = roles.get(id(b), f"intermediate ({_e(b.scope)})")
        rows.append(f'<tr><td class="lt-buf">{_e(b.name)}</td><td>{role}</td>'
                    f"<td>{_e(b.dtype)}</td><td>[{shape}]</td>"
                    f'<td class="num">{_e(human_bytes(buffer_bytes(b)))}</td></tr>')
    return ("<table class=\"lt-buffers\"><tr><th>buffer</th><th>role</th><th>dtype</th>"
            "<th>shape</th><th>size</th></tr>" + "".join(rows) + "</table>")


def _legend() -> str:
    return '<div class="lt-legend">' + "".join(
        f'<span class="lt-{k.value}">{k.value}</span>' for k in COLOURS) + "</div>"


def html_fragment(func) -> str:
    """A self-contained ``<div>`` (its own ``<style>``) showing ``func``'s loop nest."""
    names = display_names(func.body, func.size_vars)
    render = _Html(names)
    render.visit(func.body)
    nest = "".join(render.out)
    if render.hidden:
        nest += (f'<div class="lt-more">... {render.hidden} more lines not shown (the nest '
                 f"has {render.lines}; str() of the lowered function prints them all)</div>")
    args = ", ".join(_e(b.name) for b in func.buffers)
    sizes = ", ".join(_e(expr_str(v, names)) for v in func.size_vars)
    return (f"<div class=\"lt-nest\"><style>{_CSS}</style>"
            f"<h3>def {_e(func.name)}({args}{', ' + sizes if sizes else ''})</h3>"
            f"{_buffer_rows(render, func)}{_legend()}{nest}</div>")


def html_page(func, title: str | None = None) -> str:
    """One static HTML document showing ``func``'s loop nest (see :func:`html_fragment`)."""
    head = _e(title if title is not None else f"looptune: {func.name}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{head}</title></head>\n<body>\n<p>{head}</p>\n{html_fragment(func)}\n"
            "</body></html>\n")
