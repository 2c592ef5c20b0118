"""Row softmax (float32): out[i, j] = exp(x[i, j] - max_j x[i, :]) / sum_j exp(x[i, j] - max).

Four stages — row max, exp, row sum, divide (a multiply by the row's reciprocal) — fused per
row: each thread takes rows; the max, the exponentials (a one-row buffer, 4 KB at 1024
columns, that stays in L1) and the sum are computed at the row loop (compute_at), so x is
read once from memory and out written once. The sum's partial loop is computed with the exp
loop (``compute_with``), 128 columns a step: each chunk of exponentials is added to the
partial sums while still in registers, so the row is passed over three times, not four
(0.987 against 1.105-1.165 ms at 4096 x 1024, 2 threads, quiet Zen 4, in one process and in
fresh processes; 256 and 512 columns a step gain less; the template's knob ``fuse``). Both
reductions are rfactored over 32 lanes (split j by 32, rfactor the inner part): the partial
max / sum runs as a vectorized loop over the row with two vector accumulators that hide the
add latency (2.96 vs 3.15 ms with 16 lanes, one Zen 4 core, CPU time), and only 32 partials
are combined per row. exp is the C backend's inlined float32 exp (backends/c_math.py, <= 1.02
ulp, exact subnormals; glibc's libmvec, which ``-libm-exp`` selects, is up to 2.64 ulp off):
per element the exp is most of the kernel's work, as it is of torch's, which passes over each
row four times. Every loop over
columns is vectorized; the 32-lane split's tail is guarded, so any row length is exact.
Prefetch: each 128-column chunk of the exp loop asks the caches for the same chunk of the
next row (``s[e].prefetch(x, j.outer, 1, along=i.outer)``): the next row's 64 lines are
fetched while this row's exponentials are computed, where the hardware prefetchers would
start over at the row's 4 KiB page boundary. 1.167 -> 1.014 ms at 4096 x 1024, 2 threads,
in one process, 15 interleaved blocks of 20 calls (2-core Intel Xeon VM, model 167,
AVX-512); the 64 prefetches as one burst at the top of the row gained nothing (1.116 ms),
at the output loop 1.077, two rows ahead the same as one (the template's ``prefetch_row``).
Streaming stores for out (``s[out].stream(j)``, the template's knob ``stream``) do not pay
here: 0.79x at 4096 x 1024 and 0.80x at 16384 x 1024 (64 MiB, larger than the 32 MiB L3),
hand schedule A/B interleaved in one process, 2-core EPYC VM, loaded: directional only.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "softmax"
DEFAULT_ARGS = (4096, 1024)


def algorithm(N: int, M: int, dtype: str = "float32"):
    """x (N, M) -> out (N, M), softmax over each row. Returns [x, out]."""
    x = lt.placeholder((N, M), dtype, name="x")
    k1 = lt.reduce_axis(M, name="k1")
    mx = lt.compute((N,), lambda i: lt.max(x[i, k1], axis=k1), name="rowmax")
    e = lt.compute((N, M), lambda i, j: lt.exp(x[i, j] - mx[i]), name="e")
    k2 = lt.reduce_axis(M, name="k2")
    sm = lt.compute((N,), lambda i: lt.sum(e[i, k2], axis=k2), name="rowsum")
    # one division per row, then a multiply per element (a vector divide costs ~5 multiplies)
    inv = lt.compute((N,), lambda i: 1.0 / sm[i], name="inv")
    out = lt.compute((N, M), lambda i, j: e[i, j] * inv[i], name="out")
    return [x, out]


def _stages(out):
    e, inv = out.op.inputs
    (sm,) = inv.op.inputs
    x, mx = e.op.inputs
    return x, mx, e, sm, inv


def _lane_reduce(s, T, at_stage, at_loop, lanes):
    """rfactor T's reduction over ``lanes`` lanes: the partials vectorize, then T combines
    them; both computed at ``at_loop``. Returns the partials' tensor."""
    (k,) = s[T].op.reduce_axis
    _ko, ki = s[T].split(k, factor=lanes)
    TF = s.rfactor(T, ki)
    s[TF].compute_at(at_stage, at_loop)
    s[T].compute_at(at_stage, at_loop)
    lane, _ = s[TF].op.axis
    (rko,) = s[TF].op.reduce_axis
    s[TF].reorder(rko, lane)
    s[TF].vectorize(lane)
    return TF


def _fuse_sum(s, e, TF, chunk, lanes):
    """The row sum's partial loop fused into the exp loop (compute_with), ``chunk`` columns
    a step: each step computes ``chunk`` exponentials and adds them to the ``lanes`` partial
    sums while they are still in registers, instead of a second pass over the row."""
    _, ej = s[e].op.axis
    jo, ji = s[e].split(ej, factor=chunk)
    s[e].vectorize(ji)
    lane, ti = s[TF].op.axis
    (rko,) = s[TF].op.reduce_axis
    rkoo, rkoi = s[TF].split(rko, factor=chunk // lanes)
    s[TF].reorder(ti, rkoo, rkoi, lane)
    s[TF].compute_with(s[e], jo)


def _schedule(N, M, dtype, lanes, rows, buffer_exp, stream=False, fuse=0, prefetch_row=0):
    x, out = algorithm(N, M, dtype)
    _, mx, e, sm, inv = _stages(out)
    s = lt.create_schedule(out)
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=rows)
    s[out].parallel(io)
    if stream:     # non-temporal stores: out is written once and not read back here
        s[out].stream(j)
    else:
        s[out].vectorize(j)
    _lane_reduce(s, mx, s[out], ii, lanes)
    TF = _lane_reduce(s, sm, s[out], ii, lanes)
    s[inv].compute_inline()   # loop-invariant in the output loop: gcc hoists it
    if buffer_exp:
        s[e].compute_at(s[out], ii)
        if fuse:
            _fuse_sum(s, e, TF, fuse, lanes)
            if prefetch_row:    # each chunk of exps asks for its chunk of a row ahead
                s[e].prefetch(x, s[e].leaf_iter_vars[1], prefetch_row, along=io)
        else:
            s[e].vectorize(s[e].op.axis[1])
    else:  # recompute exp in the sum and in the divide: no buffer, twice the exps
        s[e].compute_inline()
    return s, [x, out]


def hand_schedule(N: int, M: int, dtype: str = "float32"):
    return _schedule(N, M, dtype, lanes=32, rows=1, buffer_exp=True, fuse=128,
                     prefetch_row=1)


@lt.template(NAME)
def template(cfg, N: int, M: int, dtype: str = "float32"):
    """Lanes of the rfactored reductions, rows per parallel iteration, exp buffered or
    recomputed, streaming stores for out, the row sum fused into the exp loop ``fuse``
    columns a step (0: a pass of its own), how many rows ahead each chunk of the fused exp
    loop prefetches its chunk of x (0: none); the fallback config is the hand schedule."""
    cfg.define_knob("lanes", [32, 16, 64, 8])
    cfg.define_knob("rows", [1, 2, 8])
    cfg.define_knob("buffer_exp", [True, False])
    cfg.define_knob("stream", [False, True])
    cfg.define_knob("fuse", [128, 0, 256, 512])
    cfg.define_knob("prefetch_row", [1, 0, 2])
    buffer_exp = cfg["buffer_exp"].val
    fuse = cfg["fuse"].val if buffer_exp else 0   # unbuffered: the sum recomputes exp
    return _schedule(N, M, dtype, cfg["lanes"].val, cfg["rows"].val, buffer_exp,
                     cfg["stream"].val, fuse, cfg["prefetch_row"].val if fuse else 0)


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="softmax")
    x = np.random.default_rng(0).standard_normal(args, dtype=np.float32) * 4
    out = np.empty_like(x)
    f(x, out)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-7)
    t = f.time(x, out, number=5, repeat=7)
    tn = lt.backends.module.time_callable(lambda: reference(x), 5, 7)
    print(f"looptune {t.median * 1e3:8.3f} ms")
    print(f"numpy    {tn.median * 1e3:8.3f} ms")
    print(f"looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
