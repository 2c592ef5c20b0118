"""Statement passes, one file each, in the order lowering runs them (schedule/lower.py):

  nesting.py      check_nesting    refuse parallel/vector loops inside a vectorized loop
  simplify.py     simplify_stmt    simplify under scoped loop/let ranges, drop dead code
  partition.py    partition_tails  split loops into full tiles and tails (a target's
                                   region_hook keeps some bodies whole)
  unroll.py       unroll_loops     copy the bodies of short constant unrolled loops
  fresh_lets.py   fresh_lets       fresh let variables for a copy (unrolling uses it)
  substitute.py   substitute_stmt  replace variables by expressions

Every pass is ``Stmt -> Stmt`` (check_nesting only raises); schedule/verify.py checks the
result of each when ``LOOPTUNE_VERIFY_IR=1``.
"""
from __future__ import annotations

from .fresh_lets import fresh_lets
from .nesting import check_nesting
from .partition import REGION_HOOKS, RegionHook, partition_tails, register_region_hook
from .simplify import simplify_stmt
from .substitute import substitute_stmt
from .unroll import MAX_UNROLL, unroll_loops

__all__ = ["MAX_UNROLL", "REGION_HOOKS", "RegionHook", "register_region_hook", "check_nesting", "fresh_lets", "partition_tails",
           "simplify_stmt", "substitute_stmt", "unroll_loops"]
