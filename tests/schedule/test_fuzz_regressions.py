"""Fuzz findings kept as fixed cases: each is the operator, its sizes and the applied steps
of one failing seed (as ``fuzz_gen.py SEED`` prints them), replayed through JSON, lowered,
checked for IR invariants, built and compared with numpy.

The steps are stored, not just the seed, so that a case keeps testing the same schedule when
the generator changes. Add a finding with its seed, a line on what went wrong, and the
``steps_json`` that ``fuzz_gen.generate(SEED).steps_json`` gives.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune.schedule.stmt import (
    Allocate,
    For,
    IfThenElse,
    LetStmt,
    Seq,
    Stmt,
    StmtVisitor,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_gen import build_and_run, replay_case

# seed: (operator, params, steps_json, what went wrong)
FINDINGS = {
    417208546: ("blur", {"H": 31, "W": 37},
                '[["compute_at", "blur_x", ["blur_y", "x"]], ["compute_inline", "blur_x", []], '
                '["split", "blur_y", ["x", 3, null]], ["parallel", "blur_y", ["y"]], '
                '["parallel", "blur_y", ["x.outer"]]]',
                "a segfault: gcc 12.2 -O3 miscompiled the tail partition's test "
                "'3 <= 37 - x.outer*3' next to the tail loop's bound '37 - x.outer*3' in an "
                "OpenMP region (loop vectorizer with value ranges; -O2 and "
                "-fno-tree-vrp were fine); the test is now 'x.outer < 12', the full tiles"),
    77003810: ("softmax", {"N": 11, "M": 37},
               '[["split", "rowsum", ["k2", 4, null]], ["rfactor", "rowsum", ["k2.outer"]], '
               '["parallel", "rowsum.rf", ["k2.outer"]], '
               '["reorder", "rowsum.rf", ["i", "k2.outer", "k2.inner"]], '
               '["unroll", "rowsum", ["i"]], ["split", "rowsum", ["k2.outer", 3, null]]]',
               "wrong results: rfactor's tail guard was an if in the innermost loop, which "
               "gcc 12.2 -O3 miscompiles for AVX-512 (masked, if-converted updates of a "
               "strided accumulator); the guard is now the loop bound"),
    77000404: ("blur", {"H": 37, "W": 9},
               '[["split", "blur_y", ["y", 8, null]], ["split", "blur_y", ["x", 2, null]], '
               '["reorder", "blur_y", ["y.outer", "x.outer", "y.inner", "x.inner"]], '
               '["reorder", "blur_x", ["x", "y"]], ["compute_at", "blur_x", ["blur_y", '
               '"y.outer"]], ["split", "blur_x", ["y", 39, null]], '
               '["cache_read", "blur_x", ["local", ["blur_y"]]], '
               '["compute_at", "blur_x.local", ["blur_y", "y.outer"]], '
               '["compute_at", "blur_x", ["blur_x.local", "ax1"]], '
               '["unroll", "blur_x.local", ["ax1"]]]',
               "C did not compile: the unrolled copies of a compute_at nest declared "
               "'blur_x_ext0' once per copy in one scope"),
    77003233: ("blur", {"H": 17, "W": 31},
               '[["split", "blur_y", ["x", 3, null]], ["split", "blur_y", ["y", 8, null]], '
               '["reorder", "blur_y", ["x.outer", "y.outer", "x.inner", "y.inner"]], '
               '["split", "blur_x", ["x", 4, null]], ["fuse", "blur_y", ["x.inner", '
               '"y.inner"]], ["unroll", "blur_y", ["x.outer"]], '
               '["vectorize", "blur_x", ["x.inner"]], '
               '["compute_at", "blur_x", ["blur_y", "x.outer"]], '
               '["compute_at", "blur_x", ["blur_y", "x.outer"]], '
               '["reorder", "blur_y", ["x.inner.y.inner.fused", "x.outer"]], '
               '["split", "blur_y", ["y.outer", null, 3]]]',
               "C did not compile: redefinition of 'blur_x_min0' in unrolled copies"),
    77005339: ("transpose", {"N": 9, "M": 17, "dtype": "uint8"},
               '[["unroll", "T", ["j"]], ["cache_read", "A", ["local", ["T"]]], '
               '["compute_at", "A.local", ["T", "j"]], ["split", "T", ["i", null, 8]], '
               '["split", "A.local", ["ax0", 1, null]], '
               '["reorder", "T", ["i.inner", "i.outer", "j"]]]',
               "C did not compile (ASan batch): redefinition of 'A_local_ext1'"),
}


class _LetsPerBlock(StmtVisitor):
    """Fails when one let variable is bound twice in one block (one C scope: the let
    declarations of a Seq's statements share it; loop bodies, branches and allocations open
    a new one)."""

    def __init__(self):
        self.blocks: list[set] = [set()]

    def _block(self, s: Stmt) -> None:
        self.blocks.append(set())
        self.visit(s)
        self.blocks.pop()

    def visit_For(self, s: For):
        self._block(s.body)

    def visit_IfThenElse(self, s: IfThenElse):
        self._block(s.then)
        if s.orelse is not None:
            self._block(s.orelse)

    def visit_Allocate(self, s: Allocate):
        self._block(s.body)

    def visit_LetStmt(self, s: LetStmt):
        assert s.var not in self.blocks[-1], f"let {s.var.name} is bound twice in one block"
        self.blocks[-1].add(s.var)
        self.visit(s.body)

    def visit_Seq(self, s: Seq):
        for x in s.stmts:
            self.visit(x)


@pytest.mark.parametrize("seed", sorted(FINDINGS))
@pytest.mark.slow
def test_fuzz_finding_is_fixed(seed):
    op_name, params, steps_json, _ = FINDINGS[seed]
    op, s = replay_case(op_name, params, steps_json)
    f = lt.lower(s, op.args)
    _LetsPerBlock().visit(f.body)
    err = build_and_run(op, s, "c", seed)
    assert err is None, f"seed {seed}: {err}\n{f}"


def test_rfactor_tail_guard_is_a_loop_bound_not_a_branch():
    op_name, params, steps_json, _ = FINDINGS[77003810]
    op, s = replay_case(op_name, params, steps_json)
    text = str(lt.lower(s, op.args))
    assert "for k2.inner in [0, (37 - (k2.outer * 4))):" in text, text
    assert "(((k2.outer * 4) + k2.inner) < 37)" not in text, text


def test_a_split_tail_is_tested_as_a_count_of_full_tiles():
    op_name, params, steps_json, _ = FINDINGS[417208546]
    op, s = replay_case(op_name, params, steps_json)
    text = str(lt.lower(s, op.args))
    assert "if (x.outer < 12):" in text, text
    assert "for x.inner in [0, (37 - (x.outer * 3))):" in text, text


@pytest.mark.parametrize("n, factor", [(37, 3), (37, 5), (36, 3), (1, 4), (7, 8), (16, 16),
                                       (17, 16), (100, 7), (23, 11), (64, 9)])
def test_split_tails_in_parallel_rows_are_exact(n, factor):
    rows = 5
    A = lt.placeholder((rows, n + 2), "float32", name="A")
    B = lt.compute((rows, n), lambda y, x: A[y, x] + A[y, x + 1] * 2.0 + A[y, x + 2], name="B")
    s = lt.create_schedule(B.op)
    y, x = s[B].op.axis
    s[B].split(x, factor=factor)
    s[B].parallel(y)
    f = lt.build(s, [A, B], name=f"tails_{n}_{factor}")
    a = np.random.default_rng(n * 31 + factor).random((rows, n + 2), dtype=np.float32)
    out = np.full((rows, n), np.nan, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, a[:, :-2] + a[:, 1:-1] * 2.0 + a[:, 2:], rtol=1e-6)


def test_unrolled_copies_get_their_own_let_variables():
    op_name, params, steps_json, _ = FINDINGS[77000404]
    op, s = replay_case(op_name, params, steps_json)
    text = str(lt.lower(s, op.args))
    # nine copies (W = 9): nine distinct variables, told apart in print
    for name in ["blur_x.ext0"] + [f"blur_x.ext0#{n}" for n in range(2, 10)]:
        assert f"let {name} = " in text, text


def test_printer_tells_apart_two_loops_with_one_name():
    # blur_x (computed at blur_y's y.outer) splits its own y: a second loop called y.outer
    # inside the first one
    op_name, params, steps_json, _ = FINDINGS[77000404]
    op, s = replay_case(op_name, params, steps_json)
    text = str(lt.lower(s, op.args))
    assert "  for y.outer in [0, 5):" in text, text
    assert "for y.outer#2 in [0, ((blur_x.ext0 + 38) // 39)):" in text, text
    # the outer one keeps its name inside the inner one's body
    assert "I[((((y.outer * 8) + ax0) + (y.outer#2 * 39)) + y.inner), 0]" in text, text


def test_printer_keeps_plain_names_for_sibling_loops():
    # four stages each with a loop called i, one after the other: no suffixes
    op_name, params, steps_json, _ = FINDINGS[77003810]
    op, s = replay_case(op_name, params, steps_json)
    text = str(lt.lower(s, op.args))
    assert "#" not in text, text
    assert text.count("\n  for i in [0, 11):") == 4, text


def test_fuzz_446306991_a_fused_stage_reading_through_a_cache_what_runs_later_is_refused():
    """Seed 446306991 (session 5, fresh base 446305814): rowsum fused into rowmax at i read
    expx through expx.local (a cache_read computed inside rowsum), but expx was computed
    between rowmax and rowsum: every output was garbage. The check of stages between host and
    fused stage now covers what the stages computed inside the fused one read."""
    steps = ('[["split", "rowsum", ["k2", null, 2]], ["fuse", "expx", ["i", "j"]], '
             '["split", "expx", ["i.j.fused", 16, null]], '
             '["compute_with", "rowsum", ["rowmax", "i"]], '
             '["split", "expx", ["i.j.fused.inner", 4, null]], '
             '["split", "expx", ["i.j.fused.outer", 8, null]], '
             '["reorder", "expx", ["i.j.fused.inner.outer", "i.j.fused.outer.outer", '
             '"i.j.fused.inner.inner", "i.j.fused.outer.inner"]], '
             '["cache_read", "expx", ["local", ["rowsum"]]], '
             '["compute_at", "expx.local", ["rowsum", "i"]]]')
    op, s = replay_case("softmax", {"N": 5, "M": 9}, steps)
    with pytest.raises(lt.ScheduleError, match="'rowsum' reads 'expx' \\(through 'expx.local', "
                       "computed inside it\\), which is computed between 'rowmax' and "
                       "'rowsum'"):
        lt.lower(s, op.args)
