"""An NCHWc convolution in the auto sketch (sketch version 11): the unpacking output
``out[n, k, y, x] = oc[n, k // 16, y, x, k % 16]`` is the contraction's epilogue (its tiles
written straight into NCHW, no NCHWc intermediate), the register tile nests the weight blocks
inside the columns, row tiles that divide the loop are choices, the weights are packed at root
first, and every sampled config is exact at sizes whose channels are not whole blocks."""
from __future__ import annotations

import re
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.operators import load_operators
from looptune.search import auto_task
from looptune.search.auto_rules import Machine, epilogue, plan_tiles, reads_along_row_tiles
from util import check_outputs, pick_config

B = 16
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WIDE = "c -march=skylake-avx512 -threads=2"


def _nchwc_conv(N, C, H, W, K, stride=1, pad=1, R=3):
    """examples/conv2d.py's conv2d_nchwc: input and weights packed into 16-channel blocks
    (zero-padded), the conv in NCHW[16]c, unpacked into the NCHW output. Returns the build
    arguments, the NCHWc contraction and a float64 numpy reference."""
    (op,) = [o for o in load_operators(str(EXAMPLES / "conv2d.py")) if o.name == "conv2d_nchwc"]
    tensors = op.algorithm(N, C, H, W, K, R, R, stride, pad)
    oc = tensors[-1].op.inputs[0]
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1

    def want(d, w):
        d = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        o = np.zeros((N, K, OH, OW))
        for dy in range(R):
            for dx in range(R):
                win = d[:, :, dy:dy + stride * (OH - 1) + 1:stride,
                        dx:dx + stride * (OW - 1) + 1:stride]
                o += np.einsum("nchw,kc->nkhw", win, w[:, :, dy, dx].astype(np.float64))
        return o
    return tensors, oc, want


def _instantiate_wide(tensors, values):
    """The AVX-512-sized auto task's config with these knob values (others: the first)."""
    task = auto_task(tensors, target=WIDE)
    return task.instantiate(pick_config(task.config_space, values))


def test_the_unpacking_output_is_the_contractions_epilogue():
    tensors, oc, _ = _nchwc_conv(1, 20, 9, 11, 40)
    s = lt.create_schedule(tensors[-1])
    epi = epilogue(s, s[oc], {id(tensors[-1])})
    assert epi is not None and epi.out.name == "out"
    # out's channel axis 1 is split by 16 into oc's block axis 1 and its lane axis 4
    assert epi.splits == ((1, B, 1, 4),)
    assert epi.axis_of == (0, 1, 2, 3, 1)
    # the OpenCL sketch keeps its one-work-item-per-element epilogues: no splits there
    assert epilogue(s, s[oc], {id(tensors[-1])}, splits=False) is None
    knobs = auto_task(tensors, target=WIDE).config_space.knobs
    assert not [k for k in knobs if k.startswith("out.")] and "oc.cache" not in knobs


@pytest.mark.parametrize("index, channels", [
    ("oc[n, k // 16, y, x]", 32),             # one index short of the tensor's rank
    ("oc[n, k // 8, y, x, k % 16]", 16),      # the two halves of k split differently
    ("oc[n, k // 16, y, x, y % 16]", 32),     # a split of another axis than the first's
])
def test_other_index_maps_are_not_epilogues(index, channels):
    _, oc, _ = _nchwc_conv(1, 16, 6, 6, 32)
    body = eval(f"lambda n, k, y, x: {index}", {"oc": oc})
    try:
        bad = lt.compute((1, channels, 6, 6), body, name="bad")
    except lt.LooptuneError:
        assert index.count(",") < 4     # only the short index is refused at definition
        return
    s = lt.create_schedule(bad)
    assert epilogue(s, s[oc], {id(bad)}) is None


def test_the_tile_nests_weight_blocks_inside_columns_and_offers_dividing_rows():
    _, oc, _ = _nchwc_conv(1, 64, 56, 56, 64)
    plan = plan_tiles(oc.op, Machine(64, 2))
    # tiled: blocks 1, rows 2, columns 3, lanes 4; the rows (2, 3) read only the broadcast
    # input, the blocks the weight vectors: blocks innermost next to the lanes
    assert plan.tiled == [1, 2, 3, 4] and plan.order == (2, 3, 1, 4)
    assert {14, 28, 7} <= set(plan.inner[3])     # 2 blocks x 14 columns = 28 accumulators
    # the fallback: that tile (the hand schedule's): the second block gives the second
    # vector, the columns (the inner of two equal loops) the rows of broadcasts
    assert [plan.inner[c][0] for c in plan.tiled] == [2, 1, 14, 16]
    _, oc2, _ = _nchwc_conv(1, 16, 8, 8, 64)
    assert plan_tiles(oc2.op, Machine(32, 2)).order == (2, 3, 1, 4)
    # with 8 lanes a block is two vectors already: no second block, 12 accumulators
    first = [plan_tiles(oc.op, Machine(32, 2)).inner[c][0] for c in plan.tiled]
    assert first[0] == 1 and first[3] == 16 and first[1] * first[2] * 2 <= 12


def test_weights_are_packed_at_root_first_and_a_depthwise_padding_per_tile():
    tensors, oc, _ = _nchwc_conv(1, 64, 28, 28, 64)
    knobs = auto_task(tensors, target=WIDE).config_space.knobs
    assert knobs["wpack.at"].values[0] == "root"      # the same for every row tile
    assert knobs["dpack.at"].values[0] == "root"      # every channel block per output block
    plan = plan_tiles(oc.op, Machine(64, 2))
    assert not reads_along_row_tiles(oc.op, oc.op.inputs[1].op, plan)
    # a depthwise conv reads its own channel's rows: its padding per tile first
    X = lt.placeholder((1, 32, 20, 20), "float32", name="X")
    Wd = lt.placeholder((32, 3, 3), "float32", name="Wd")
    P = lt.compute((1, 32, 22, 22), lambda n, c, y, x: lt.if_then_else(
        lt.all(y >= 1, y < 21, x >= 1, x < 21), X[n, c, y - 1, x - 1], 0.0), name="pad")
    ry, rx = lt.reduce_axis(3, name="ry"), lt.reduce_axis(3, name="rx")
    D = lt.compute((1, 32, 20, 20), lambda n, c, y, x: lt.sum(
        P[n, c, y + ry, x + rx] * Wd[c, ry, rx], axis=[ry, rx]), name="dw")
    assert reads_along_row_tiles(D.op, P.op, plan_tiles(D.op, Machine(64, 2)))


def test_a_middle_loop_wider_than_its_tiles_does_not_widen_the_tile_buffer():
    """oc.mid4 = 2 with the lanes' tile of 16 (one tile along 16 lanes): the middle split
    was as wide as asked, its tail guard hid from bound inference that the tile stays in one
    block, so the unpacked tile buffer held (and computed) two blocks per block asked."""
    tensors, _, _ = _nchwc_conv(1, 64, 56, 56, 64)
    sp = auto_task(tensors, target=WIDE).config_space
    assert sp.knobs["oc.tile4"].values[0] == 16 and 2 in sp.knobs["oc.mid4"].values
    s, _ = _instantiate_wide(tensors, {"oc.tile1": 2, "oc.tile2": 1, "oc.tile3": 14,
                                       "oc.mid4": 2})
    text = str(lt.lower(s, tensors))
    (alloc,) = re.findall(r"allocate oc\[float32 \* ([0-9, ]+)\]", text)
    assert alloc == "1, 2, 1, 14, 16"
    # the write-back reads the tile across its vectors (16 floats apart): not vectorized
    (store,) = [ln for ln in text.splitlines() if ln.strip().startswith("out[")]
    loops = text[:text.index(store)].splitlines()
    assert "vectorized" not in loops[-1]


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 20, 9, 11, 40, 1), (2, 16, 8, 7, 16, 2),
                                   (1, 33, 6, 10, 24, 1)])
def test_sampled_configs_of_an_nchwc_conv_are_exact(shape):
    *dims, stride = shape
    tensors, _, want = _nchwc_conv(*dims, stride=stride)
    task = auto_task(tensors)
    sp = task.config_space
    picks = [0] + [c.index for c in sp.sample(min(4, sp.size), 3)]
    # the weight blocks and columns of the 28-accumulator tile, no middle split
    if "oc.tile1" in sp.knobs:       # two blocks or more
        picks.append(pick_config(sp, {"oc.tile1": 2, "oc.mid1": 1,
                                      "oc.tile3": sp.knobs["oc.tile3"].values[-1]}).index)
    for i in picks:
        try:
            s, _ = task.instantiate(i)
        except lt.ScheduleError:
            continue            # refused by a primitive: an invalid candidate, not a result
        check_outputs(s, tensors, want)


def test_a_tile_beyond_the_registers_does_not_unroll_its_reduction_steps():
    """8 x 4 positions of one 16-float vector: 32 accumulators, more than AVX-512's 28 free
    registers. With its 8 reduction steps unrolled too ("tile+k") gcc took 24 s to compile
    it; such a tile now builds as "tile" does (the same program, measured once), while a
    tile within the registers still unrolls its steps."""
    tensors, _, _ = _nchwc_conv(1, 20, 9, 11, 40)

    def text(**values):
        s, _ = _instantiate_wide(tensors, {"oc.red1": 2, "oc.red2": 2, "oc.red3": 2,
                                           **values})
        return str(lt.lower(s, tensors))
    big = {"oc.tile1": 1, "oc.tile2": 8, "oc.tile3": 4}
    assert text(**big, **{"oc.unroll": "tile+k"}) == text(**big, **{"oc.unroll": "tile"})
    small = {"oc.tile1": 2, "oc.tile2": 1, "oc.tile3": 4}
    assert text(**small, **{"oc.unroll": "tile+k"}) != text(**small, **{"oc.unroll": "tile"})
