"""The tensor-expression language: what to compute."""
from .expr import BinKind, BinOp, Call, Cast, Const, Expr, IterKind, IterVar, Load, Not, Reduce, \
    Select, Var, const
from .simplify import simplify
from .tensor import ComputeOp, PlaceholderOp, Tensor, compute, placeholder, reduce_axis, var
from .visitor import ExprMutator, ExprVisitor, substitute

__all__ = ["BinKind", "BinOp", "Call", "Cast", "Const", "Expr", "IterKind", "IterVar", "Load",
           "Not", "Reduce", "Select", "Var", "const", "simplify", "ComputeOp", "PlaceholderOp",
           "Tensor", "compute", "placeholder", "reduce_axis", "var", "ExprMutator",
           "ExprVisitor", "substitute"]
