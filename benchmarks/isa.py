"""Every system of a benchmark held to one instruction set: an AVX2 machine stood in for on an
AVX-512 one (``peers.py --isa avx2``).

The machines these benchmarks run on change from session to session (AVX2 Zen 3, AVX-512 Zen 4
and Xeons), and issue 19 asks for the goal on AVX2 machines too. Each library has its own,
documented switch for the instruction set it dispatches to; ``environment`` sets them all, and
``verify`` checks inside a worker that its library obeyed (a run whose library ignored the
switch would compare an AVX-512 peer against AVX2 code, so it fails instead of reporting):

- looptune: ``LOOPTUNE_MARCH=x86-64-v3`` (the -march of C targets that name none; the
  schedules size their tiles from it: 8 float lanes, 16 vector registers).
- numpy: ``NPY_DISABLE_CPU_FEATURES`` for its AVX-512 dispatch targets, and OpenBLAS's
  ``OPENBLAS_CORETYPE=Haswell`` (its AVX2 kernels).
- torch: ``ATEN_CPU_CAPABILITY=avx2`` (ATen's kernels), ``MKL_ENABLE_INSTRUCTIONS=AVX2``
  (MKL's sgemm) and ``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN's convolutions).
- Halide: ``HL_JIT_TARGET`` without the AVX-512 features.

``native`` sets nothing: every library picks the machine's best.
"""
from __future__ import annotations

ISAS = ("native", "avx2")
AVX2_MARCH = "x86-64-v3"
HALIDE_AVX2 = "x86-64-linux-avx-avx2-f16c-fma-sse41"


def _numpy_avx512_targets() -> list[str]:
    """numpy's AVX-512 dispatch targets (``X86_V4``, ``AVX512_SKX``, ... by numpy version)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__
    return [d for d in __cpu_dispatch__ if d.startswith("AVX512") or d == "X86_V4"]


def environment(isa: str) -> dict[str, str]:
    """The variables that hold every system to ``isa`` (nothing for native)."""
    if isa == "native":
        return {}
    if isa != "avx2":
        raise ValueError(f"isa {isa!r}: choose one of {', '.join(ISAS)}")
    env = {"LOOPTUNE_MARCH": AVX2_MARCH, "OPENBLAS_CORETYPE": "Haswell",
           "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
           "ONEDNN_MAX_CPU_ISA": "AVX2", "HL_JIT_TARGET": HALIDE_AVX2}
    off = _numpy_avx512_targets()
    if off:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(off)
    return env


def verify(system: str, isa: str) -> str:
    """In a worker: what instruction set ``system`` (numpy, torch, halide, looptune-*) runs
    at here, e.g. ``"AVX2 (OpenBLAS Haswell)"``; RuntimeError when it is not ``isa``."""
    if isa == "native":
        return ""
    seen = {"numpy": _numpy_isa, "torch": _torch_isa, "halide": _halide_isa}.get(
        system, _looptune_isa)()
    if not seen.startswith("AVX2"):
        raise RuntimeError(f"{system} was to run at {isa} but runs at {seen}; its switch "
                           "(benchmarks/isa.py) did not take, so its time is not reported")
    return seen


def _numpy_isa() -> str:
    from numpy._core._multiarray_umath import __cpu_features__
    from threadpoolctl import threadpool_info
    on = [d for d in _numpy_avx512_targets() if __cpu_features__.get(d)]
    if on:
        return f"AVX-512 (numpy dispatches to {', '.join(on)})"
    blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    cores = {str(i.get("architecture")) for i in blas}
    if cores - {"Haswell"}:
        return f"{'/'.join(sorted(cores))} (OpenBLAS core type)"
    return "AVX2 (numpy without AVX-512 dispatch" + (", OpenBLAS Haswell)" if blas else ")")


def _torch_isa() -> str:
    import os

    import torch
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2":
        return f"{cap} (ATen)"
    if os.environ.get("MKL_ENABLE_INSTRUCTIONS") != "AVX2" or \
            os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2":
        return "unknown (MKL/oneDNN not held to AVX2)"
    return "AVX2 (ATen, MKL, oneDNN)"


def _halide_isa() -> str:
    import halide as hl
    t = hl.get_jit_target_from_environment()
    if t.has_feature(hl.TargetFeature.AVX512):
        return f"AVX-512 (Halide target {t})"
    return f"{'AVX2' if t.has_feature(hl.TargetFeature.AVX2) else 'no AVX2'} (Halide target {t})"


def _looptune_isa() -> str:
    import looptune as lt
    t = lt.Target.parse("c")
    lanes = t.vector_lanes("float32")
    return f"AVX2 (-march={t.march()}, {lanes} float lanes)" if lanes == 8 else \
        f"{lanes} float lanes (-march={t.march()})"
