"""benchmarks/memory_floor.py: the streaming floor of a row-wise kernel."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import memory_floor


def test_the_floor_kernels_are_exact_at_odd_sizes():
    scale, rowsum = memory_floor.kernels(37, 101, 2)
    streamed = memory_floor.streamed_scale(37, 101, 2)
    assert "lt_stream_f32" in streamed.source          # non-temporal stores
    a = np.random.default_rng(3).random((37, 101), dtype=np.float32)
    b, c = np.empty_like(a), np.empty(37, np.float32)
    streamed(a, b)
    np.testing.assert_array_equal(b, a * np.float32(2))
    scale(a, b)
    rowsum(a, c)
    np.testing.assert_array_equal(b, a * np.float32(2))
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5)


def test_it_prints_both_floors_with_their_traffic(capsys):
    memory_floor.main(["--rows", "64", "--cols", "256", "--rounds", "1"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert re.fullmatch(r"scale \(read 0.0625 \+ write 0.0625 MiB\): [\d.]+ ms, [\d.]+ GB/s of "
                        r"array traffic", out[0])
    assert out[1].startswith("streamed scale (read 0.0625 + write 0.0625 MiB): ")
    assert out[2].startswith("row sum (read 0.0625 MiB): ")
