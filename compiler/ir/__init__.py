"""Shared, frozen value types of the compiler: what crosses from one stage to the next. Standard library only.

- `poly`: exact polynomials in the shape variables B, S, L.
- `block_graph`: the partitioned model (`Block`, `Edge`, `BlockGraph`, `OpCost`, `Work`).
- `precision`: `Precision`, the weight and KV dtypes of a deployment.
- `device_spec`: accelerators as sourced data.
- `pool_option`: a costed replica of a role (what cost hands place).
- `placement`: the solver's `Instance` and `Solution`.
- `estimate`: one deployment's predicted metrics.
- `calibration`: a device's measured peaks and fitted efficiencies.
- `errors`: the error hierarchy and its exit codes; `files`: where and how gimletc writes files.
- `units`: quantities as messages print them (`power_text`).
"""

from compiler.ir.block_graph import (
    PHASES, ROLES, Block, BlockGraph, Edge, OpCost, UnaccountedOp, Work, expert_touch_fraction,
)
from compiler.ir.errors import BadInput, GimletError, Infeasible, RuntimeFailure, UnsupportedModel
from compiler.ir.poly import VARIABLES, Poly
from compiler.ir.precision import DTYPE_BYTES, Precision, dtype_bytes

__all__ = [
    "DTYPE_BYTES", "PHASES", "ROLES", "VARIABLES", "Block", "BlockGraph", "Edge", "OpCost", "Poly", "Precision",
    "UnaccountedOp", "Work", "dtype_bytes", "expert_touch_fraction",
    "BadInput", "GimletError", "Infeasible", "RuntimeFailure", "UnsupportedModel",
]
