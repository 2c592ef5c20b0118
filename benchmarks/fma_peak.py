"""The machine's float32 FMA peak: the ceiling for sgemm and conv2d.

    python benchmarks/fma_peak.py [--threads 1,2] [--rounds 5] [--gflop 2.1 ...]

A C loop of independent fused multiply-adds on the widest vectors the compiler targets with
``-march=native`` (16 floats with AVX-512, 8 with AVX2), enough accumulators to cover the FMA
latency on every pipe, run on 1 and on N OpenMP threads: the best of ``--rounds`` runs, in
GFLOP/s (an FMA counts as 2 FLOP). No memory is touched, so nothing a kernel does can beat it.

``--gflop F --ms T`` (repeatable pairs) prints how close a measured kernel comes: e.g. sgemm
1024^3 (2.147 GFLOP) at 9.76 ms is 220 GFLOP/s. A peer that is already at 93% of the peak
leaves no room for 1.1x: say so rather than chase it. Run it on a quiet machine: the N-thread
figure needs every core.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef __AVX512F__
#define W 16
#define ACC 12
#else
#define W 8
#define ACC 10
#endif
typedef float vf __attribute__((vector_size(W * 4)));
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
  long iters = atol(argv[1]);
  int rounds = atoi(argv[2]);
  double best = 0;
  float sink = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    #pragma omp parallel reduction(+ : sink)
    {
      vf a[ACC], b, c;
      for (int l = 0; l < W; l++) { b[l] = 1.0000001f; c[l] = 1e-7f; }
      for (int k = 0; k < ACC; k++)
        for (int l = 0; l < W; l++) a[k][l] = (float)(k + omp_get_thread_num());
      for (long i = 0; i < iters; i++) {
        #pragma GCC unroll 16
        for (int k = 0; k < ACC; k++) a[k] = a[k] * b + c;
        /* b and c stay in registers: without this gcc reloads b from the stack in every
           FMA (a memory operand each), which ran the loop below the peak */
        __asm__ volatile("" : "+v"(b), "+v"(c));
      }
      for (int k = 0; k < ACC; k++)
        for (int l = 0; l < W; l++) sink += a[k][l];
    }
    double t = now() - t0;
    double flop = 2.0 * W * ACC * (double)iters * omp_get_max_threads();
    if (flop / t > best) best = flop / t;
  }
  printf("%d %d %.3f %g\n", omp_get_max_threads(), W, best / 1e9, (double)sink);
  return 0;
}
"""


def build(workdir: str, march: str = "native") -> str:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        sys.exit("fma_peak: no C compiler (set CC)")
    src, exe = os.path.join(workdir, "peak.c"), os.path.join(workdir, "peak")
    with open(src, "w") as f:
        f.write(SOURCE)
    subprocess.run([cc, "-O2", f"-march={march}", "-ffp-contract=fast", "-fopenmp", src, "-o",
                    exe], check=True)
    return exe


def peak(exe: str, threads: int, rounds: int, iters: int = 40_000_000) -> tuple[int, float]:
    """(vector lanes, best GFLOP/s) on ``threads`` threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread")
    out = subprocess.run([exe, str(iters), str(rounds)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[1]), float(out[2])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gflop", type=float, action="append", default=[],
                    help="a kernel's GFLOP (pair each with --ms)")
    ap.add_argument("--ms", type=float, action="append", default=[],
                    help="that kernel's time in ms")
    ns = ap.parse_args(argv)
    if len(ns.gflop) != len(ns.ms):
        ap.error("give --gflop and --ms in pairs")
    threads = sorted({int(t) for t in ns.threads.split(",")})
    with tempfile.TemporaryDirectory(prefix="fma-peak-") as d:
        exe = build(d)
        peaks = {t: peak(exe, t, ns.rounds) for t in threads}
    for t, (lanes, gf) in peaks.items():
        print(f"{t} thread(s), {lanes}-lane float32 FMAs: {gf:8.1f} GFLOP/s")
    top = peaks[threads[-1]][1]
    for gflop, ms in zip(ns.gflop, ns.ms):
        rate = gflop / (ms / 1e3)
        print(f"{gflop:g} GFLOP in {ms:g} ms: {rate:.1f} GFLOP/s = {rate / top:.0%} of the "
              f"{threads[-1]}-thread peak; 1.1x that speed would need {1.1 * rate / top:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
