"""The opencl work-group region behind a hook: lowering and tail partitioning know nothing of
OpenCL; Target("opencl").region_hook (backends/opencl_barriers.py) keeps a work-group region
(threadIdx loops beside a buffer the group shares) whole, and build passes it."""
from __future__ import annotations

import numpy as np
import pytest
import util

import looptune as lt
from looptune.backends.opencl_barriers import REGION_HOOK, WorkGroupRegions
from looptune.lang.expr import BinKind, BinOp, Const, Var
from looptune.schedule.passes import partition_tails
from looptune.schedule.stmt import (Allocate, Buffer, For, ForKind, IfThenElse, Stmt, Store,
                                    seq)


def test_target_supplies_the_hook():
    assert lt.Target.parse("opencl").region_hook is REGION_HOOK
    assert lt.Target.parse("c").region_hook is None


def test_lowering_keeps_the_work_group_region_only_with_the_hook():
    w = util.matmul(37, 53, 29)
    s = util.shared_tiles(w)
    plain = str(lt.lower(s, w.args))
    kept = str(lt.lower(s, w.args, region_hook=REGION_HOOK))
    assert plain.count("allocate A.shared") > 1        # partitioned: the region duplicated
    assert kept.count("allocate A.shared") == 1


def test_hook_decides_per_body():
    """partition_tails asks the hook about each loop body; a hook that keeps every body whole
    turns partitioning off, the opencl hook only where threads share an allocation."""
    i, ii = Var("i", "int32"), Var("ii", "int32")
    out = Buffer("O", (10,), "float32")
    ext = BinOp(BinKind.MIN, Const(4, "int32"), Const(10, "int32") - i * 4)
    tail = For(ii, Const(0, "int32"), ext, ForKind.SERIAL,
               Store(out, (i * 4 + ii,), Const(1.0, "float32")))
    loop = For(i, Const(0, "int32"), Const(3, "int32"), ForKind.SERIAL, tail)

    class KeepAll:
        def keeps_whole(self, body: Stmt) -> bool:
            return True

    assert isinstance(partition_tails(loop).body, IfThenElse)
    assert partition_tails(loop, KeepAll()) == loop
    assert isinstance(partition_tails(loop, WorkGroupRegions()).body, IfThenElse)
    t = Var("t", "int32")
    local = Buffer("L", (4,), "float32", "shared")
    threads = For(t, Const(0, "int32"), Const(4, "int32"), ForKind.THREAD,
                  Store(local, (t,), Const(0.0, "float32")), "threadIdx.x")
    assert REGION_HOOK.keeps_whole(Allocate(local, seq(threads, tail)))
    assert not REGION_HOOK.keeps_whole(seq(threads, tail))      # nothing shared
    assert not REGION_HOOK.keeps_whole(Allocate(local, tail))    # no threads


def test_built_with_the_hook_differential(opencl):
    """What build compiles for opencl (with the hook) against numpy, at odd sizes."""
    w = util.matmul(37, 53, 29)
    f = lt.build(util.shared_tiles(w), w.args, target=opencl, name=w.name)
    data = w.make_data(np.random.default_rng(3))
    util.run_check(None, w.args, data, w.reference(data), f=f, **w.tol)
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in f.source


def test_kernel_barriers_are_verified(monkeypatch):
    """The opencl generator verifies each kernel after insert_barriers (LOOPTUNE_VERIFY_IR=1):
    a barrier placed under an ``if`` is caught before any OpenCL compiler runs."""
    from looptune.backends import opencl_codegen
    from looptune.schedule.stmt import Barrier
    from looptune.schedule.verify import IRVerifyError
    w = util.matmul(37, 53, 29)
    f = lt.lower(util.shared_tiles(w), w.args, region_hook=REGION_HOOK)
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in opencl_codegen.generate_opencl(f).source
    cond = Var("n", "int32") < 3
    monkeypatch.setattr(opencl_codegen, "insert_barriers",
                        lambda part, local: seq(part, IfThenElse(cond, Barrier())))
    with pytest.raises(IRVerifyError, match=r"verify\(after insert_barriers\): variable 'n'"):
        opencl_codegen.generate_opencl(f)
    monkeypatch.setattr(opencl_codegen, "insert_barriers",
                        lambda part, local: _under_if(part))
    with pytest.raises(IRVerifyError, match=r"verify\(after insert_barriers\): a barrier "
                                            "inside an if"):
        opencl_codegen.generate_opencl(f)


def _under_if(part: Stmt) -> Stmt:
    """``part`` with a barrier under ``if (blockIdx.y loop var) < 3`` inside its outer loop."""
    from looptune.schedule.stmt import Barrier
    assert isinstance(part, For), part
    return For(part.var, part.min, part.extent, part.kind,
               seq(IfThenElse(part.var < 3, Barrier()), part.body), part.tag)


def test_lower_with_a_target_uses_the_hook_its_backend_registered():
    """``lt.lower(s, args, target="opencl")`` (or a Target) prints the nest build compiles;
    the C target and no target partition as before."""
    w = util.matmul(37, 53, 29)
    s = util.shared_tiles(w)
    kept = str(lt.lower(s, w.args, region_hook=REGION_HOOK))
    assert str(lt.lower(s, w.args, target="opencl")) == kept
    assert str(lt.lower(s, w.args, target=lt.Target.parse("opencl"))) == kept
    assert str(lt.lower(s, w.args, target="c")) == str(lt.lower(s, w.args)) != kept
