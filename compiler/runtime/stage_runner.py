"""Execute one stage rank's blocks: the generated program, its weight shard, its KV cache, its TP group.

Before: a hash-verified program text and a safetensors shard. The runner calls
the program's block functions in order on flat tokens; attention blocks get
the paged cache's ``attend``; after each attention / FFN / MoE block of a
tensor-parallel stage it all-reduces (sums) the ranks' outputs, see
[Note: tensor-parallel residual] in compiler/emit/stage_programs.py.
"""

from __future__ import annotations

import time
from typing import Any

from compiler.runtime.kv_cache import PagedKVCache, Seq


def load_program(source: str, filename: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"gimletc_stage:{filename}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated code whose sha256 was verified
    return namespace


class StageRunner:
    def __init__(self, namespace: dict[str, Any], weights: dict[str, Any], cache: PagedKVCache | None,
                 tp_group=None) -> None:
        self.ns = namespace
        self.w = weights
        self.cache = cache
        self.tp_group = tp_group
        self.compute_s = 0.0
        # the run dtype: the shard's floating tensors (inv_freq stays fp32)
        self.dtype = next((t.dtype for k, t in sorted(weights.items()) if t.is_floating_point()
                           and k != "rope.inv_freq"), None)

    def run(self, blocks: list[str], first, positions, seqs: list[Seq]):
        """Run `blocks` (those this rank has; ``head`` only on rank 0) on `first` (ids or hidden states)."""
        import torch
        import torch.distributed as dist

        start = time.perf_counter()
        x = first
        rope = None
        table = self.ns["BLOCKS"]
        with torch.no_grad():
            for block in blocks:
                fn = table.get(block)
                if fn is None:
                    continue  # head on a rank > 0
                if block == "embed":
                    x = fn(self.w, x, positions)
                elif block.endswith(".attn"):
                    if rope is None:
                        rope = self.ns["rope_tables"](self.w, positions, self.dtype)
                    x = fn(self.w, x, *rope, lambda layer, q, k, v, **options: self.cache.attend(
                        layer, q, k, v, seqs, **options))
                else:
                    x = fn(self.w, x)
                if self.tp_group is not None and block not in ("embed", "head"):
                    dist.all_reduce(x, group=self.tp_group)
        self.compute_s += time.perf_counter() - start
        return x
