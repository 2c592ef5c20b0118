"""The ONNX backend conformance suite (node cases) for the operators looptune claims.

```
python -m looptune.graph.onnx_conformance              # reference run: per-op counts
python -m looptune.graph.onnx_conformance --compile    # the same through lt.graph.compile
python -m looptune.graph.onnx_conformance --op Conv -v # one op, failures in full
```

A case is *claimed* when every operator of its model is in :func:`supported_ops` (the cases
of onnx 1.23: ``onnx.backend.test.case.node.collect_testcases(None)``, each a model with one
set of inputs and expected outputs). A claimed case passes, or is listed in :data:`EXCLUDED`
with its reason. Outputs are compared as ONNX's test runner does: same count, shape and dtype,
then ``assert_allclose`` with the case's rtol/atol.

Each case counts for its *subject*: the operator of its one node, or for a function's
expansion (``test_softmax_axis_0_expanded``) the subject of the case it expands.
"""
from __future__ import annotations

import argparse
import functools
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .registry import supported_ops

_DT = r"(BFLOAT16|bfloat16|FLOAT8\w*|FLOAT4\w*|FLOAT6\w*|U?INT4|U?INT2|STRING|string)"


class Exclusion(NamedTuple):
    """Why claimed cases do not run: ``reason`` for the report, ``raises`` a regex of the
    GraphError looptune raises for them (None for a known gap that fails otherwise)."""

    reason: str
    raises: str | None


# Claimed cases that do not pass, by a regex on the case name (full match). The tests check
# that each rule still matches a claimed case (none goes stale) and that looptune refuses the
# cases with the GraphError given.
EXCLUDED: dict[str, Exclusion] = {
    r"test_(and|or|xor)(2d|3d|4d|_bcast\w+)|test_not_(2d|3d|4d)": Exclusion(
        "opset 1/7 models (looptune reads opsets >= 13)", r"looptune reads opsets 13 and newer"),
    r"test_dropout_(default|random)_old": Exclusion(
        "opset 11 (looptune reads opsets >= 13)", r"uses opset 11; looptune reads opsets 13"),
    rf"test_\w*{_DT}\w*": Exclusion(
        "a dtype looptune does not compute with (bfloat16, float8/6/4, int4/2, string)",
        r"dtype \w+ is not supported by looptune"),
    r"test_pow_types_(int32|int64)_\w+|test_pow_types_float32_uint(32|64)": Exclusion(
        "Pow with an integer base, or an unsigned exponent (looptune's Pow takes a float base "
        "and a float or signed int exponent)",
        r"the (base|exponent) \(input \d\) has dtype u?int\d+; supported"),
    r"test_reduce_(max|min)_bool_inputs": Exclusion(
        "ReduceMax/Min over bool", r"dtype bool is not supported"),
    r"test_\w*(empty_set|zero_size)\w*|test_reshape_allowzero_reordered": Exclusion(
        "empty tensors (a dimension of size 0): looptune graphs take non-empty tensors",
        r"has size 0; looptune graphs take non-empty tensors"),
    r"test_castlike_(FLOAT|FLOAT16|DOUBLE)_to_(FLOAT|FLOAT16|DOUBLE)(_expanded)?": Exclusion(
        "CastLike's 'like' input is an empty tensor (looptune graphs take non-empty tensors)",
        r"input 'like': dimension 0 has size 0"),
    r"test_batchnorm_\w*_training_mode": Exclusion(
        "BatchNormalization in training mode (inference only)",
        r"training_mode=1 is not supported"),
    r"test_training_dropout\w*": Exclusion(
        "Dropout in training mode (inference only)", r"training_mode=True is not supported"),
    r"test_maxpool_with_argmax_\w+": Exclusion(
        "MaxPool's Indices output (looptune computes the maximum only)",
        r"output 1 \(Indices, '\w+'\) is not supported"),
    r"test_identity_(sequence|opt)": Exclusion(
        "sequence and optional values (looptune graphs take tensors)",
        r"is of type (sequence|optional), not a tensor"),
}


# Cases the reference run passes and the compiled run (lt.graph.compile) does not: none
# (size-0 intermediates, once excluded here, are constants with no kernel since compile runs
# looptune.graph.fusion.empty.drop_empty_values).
COMPILE_EXCLUDED: dict[str, Exclusion] = {}


@dataclass
class OpCount:
    """Conformance of one operator: cases claimed, passed, excluded, failed (name -> why)."""

    claimed: int = 0
    passed: int = 0
    excluded: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple[Any, ...]:
    """Every node case of the installed onnx (loaded once; onnx's generators warn about the
    overflows they test, which we do not repeat)."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(None))


def case_ops(case) -> set[str]:
    """The operators a case's model uses (``domain::Op`` outside the default domain)."""
    return {n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
            for n in case.model.graph.node}


def subject(case) -> str:
    """The operator a case tests (see the module docstring)."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    if base != case.name:
        by_name = {c.name: c for c in all_cases()}
        if base in by_name:
            return subject(by_name[base])
    ops = [n.op_type for n in case.model.graph.node if n.op_type != "Constant"]
    return ops[0] if len(set(ops)) == 1 else (ops[0] if ops else "Constant")


def exclusion(name: str, mode: str = "reference") -> Exclusion | None:
    """The exclusion rule of a case in ``mode`` (compile: those of both dicts), or None."""
    rules = {**EXCLUDED, **COMPILE_EXCLUDED} if mode == "compile" else EXCLUDED
    for pattern, why in rules.items():
        if re.fullmatch(pattern, name):
            return why
    return None


def claimed_cases(ops: set[str] | None = None) -> list[Any]:
    """Cases whose operators are all supported (``Constant`` is folded by the importer), in
    the suite's order; with ``ops``, those whose subject is one of them."""
    have = set(supported_ops()) | {"Constant"}
    out = [c for c in all_cases() if case_ops(c) <= have]
    return [c for c in out if ops is None or subject(c) in ops]


def run_case(case, mode: str = "reference", optimize: bool = False) -> None:
    """Run one case through :class:`LooptuneBackend` (``optimize``: the reference run after
    ``lt.graph.optimize``); AssertionError (or the GraphError of the import) when it does not
    agree."""
    from onnx import TensorProto, numpy_helper

    from .onnx_backend import LooptuneBackend
    rep = LooptuneBackend.prepare(case.model, mode=mode, optimize=optimize)
    for inputs, expected in case.data_sets:
        # as ONNX's runner does: some cases hold TensorProtos (float16 data, say)
        arrays = [numpy_helper.to_array(x) if isinstance(x, TensorProto) else x for x in inputs]
        with np.errstate(all="ignore"):
            got = rep.run(arrays)
        assert_similar(list(expected), list(got), case.rtol, case.atol)


def assert_similar(expected, got, rtol: float, atol: float) -> None:
    """ONNX's runner check: count, shape, dtype, then allclose (strings equal)."""
    from onnx import TensorProto, numpy_helper
    assert len(got) == len(expected), f"{len(got)} outputs; expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        e = numpy_helper.to_array(e) if isinstance(e, TensorProto) else np.asarray(e)
        g = np.asarray(g)
        assert g.shape == e.shape, f"output {k}: shape {g.shape}; expected {e.shape}"
        assert g.dtype == e.dtype, f"output {k}: dtype {g.dtype}; expected {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {k}")


def run_suite(mode: str = "reference", ops: set[str] | None = None) -> dict[str, OpCount]:
    """Run every claimed case (``ops``: of those subjects only); per-subject counts."""
    counts: dict[str, OpCount] = {}
    for case in claimed_cases(ops):
        c = counts.setdefault(subject(case), OpCount())
        c.claimed += 1
        why = exclusion(case.name, mode)
        if why is not None:
            c.excluded[case.name] = why.reason
            continue
        try:
            run_case(case, mode)
            c.passed += 1
        except Exception as e:  # noqa: BLE001  (a report: every failure listed, none stops it)
            c.failed[case.name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    return dict(sorted(counts.items()))


def format_counts(counts: dict[str, OpCount], verbose: bool = False) -> str:
    """A table: op, passed/claimed, excluded, failed; then the exclusions and failures."""
    have = set(supported_ops())
    lines = [f"{'operator':<30}{'passed':>8}{'claimed':>9}{'excluded':>10}{'failed':>8}"]
    for op, c in counts.items():
        name = op if op in have else op + " (expanded)"
        lines.append(f"{name:<30}{c.passed:>8}{c.claimed:>9}{len(c.excluded):>10}"
                     f"{len(c.failed):>8}")
    tot = [sum(x) for x in zip(*((c.passed, c.claimed, len(c.excluded), len(c.failed))
                                 for c in counts.values()))] or [0, 0, 0, 0]
    lines.append(f"{'total':<30}{tot[0]:>8}{tot[1]:>9}{tot[2]:>10}{tot[3]:>8}")
    if any(op not in have for op in counts):
        lines.append("(expanded): an operator looptune lacks, whose function expansion it runs")
    reasons = Counter(w for c in counts.values() for w in c.excluded.values())
    for why, k in reasons.items():
        lines.append(f"excluded ({k}): {why}")
    for op, c in counts.items():
        for name, why in c.failed.items():
            lines.append(f"FAILED {name}: {why if verbose else why[:150]}")
        if verbose:
            lines.extend(f"excluded {name}: {why}" for name, why in c.excluded.items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m looptune.graph.onnx_conformance",
                                description="ONNX backend node cases of the claimed ops")
    p.add_argument("--compile", action="store_true", help="run through lt.graph.compile")
    p.add_argument("--op", action="append", help="only cases of this operator (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true")
    ns = p.parse_args(argv)
    counts = run_suite("compile" if ns.compile else "reference", set(ns.op) if ns.op else None)
    print(format_counts(counts, ns.verbose))
    return 1 if any(c.failed for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
