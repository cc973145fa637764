"""gimletc: a heterogeneous multi-silicon placement compiler for LLM inference.

The public Python API. Importing this package is cheap: torch and transformers
load only when a function that traces a model runs.

>>> import compiler
>>> "llama-3.1-70b" in compiler.preset_names()
True
"""

from compiler.ir import BadInput, Block, BlockGraph, Edge, GimletError, Infeasible, OpCost, Poly, Work
from compiler.model_spec import ModelSpec, preset_names, resolve_model
from compiler.pipeline import Timings, block_graph

__all__ = [
    "BadInput", "Block", "BlockGraph", "Edge", "GimletError", "Infeasible", "ModelSpec", "OpCost", "Poly",
    "Timings", "Work", "block_graph", "preset_names", "resolve_model", "summarize",
]


def summarize(*args, **kwargs):
    """See `compiler.inspect_report.summarize`."""
    from compiler.inspect_report import summarize as _summarize

    return _summarize(*args, **kwargs)
