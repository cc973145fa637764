"""Shared, frozen value types of the compiler. Standard library only."""

from compiler.ir.block_graph import (
    DTYPE_BYTES, PHASES, ROLES, Block, BlockGraph, Edge, OpCost, UnaccountedOp, Work, dtype_bytes,
    expert_touch_fraction,
)
from compiler.ir.errors import BadInput, GimletError, Infeasible, RuntimeFailure, UnsupportedModel
from compiler.ir.poly import VARIABLES, Poly

__all__ = [
    "DTYPE_BYTES", "PHASES", "ROLES", "VARIABLES", "Block", "BlockGraph", "Edge", "OpCost", "Poly",
    "UnaccountedOp", "Work", "dtype_bytes", "expert_touch_fraction",
    "BadInput", "GimletError", "Infeasible", "RuntimeFailure", "UnsupportedModel",
]
