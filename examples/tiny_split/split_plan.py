"""Write a runnable plan with BOTH splits for a tiny preset, through the public emit functions.

    python examples/tiny_split/split_plan.py llama-tiny plan-split/
    gimletc run plan-split/ --prompt-ids 1,2,3,4 --max-new-tokens 8

Pools: prefill (tp=2) -> KV pages -> decode attention (tp=1) <-> hidden states <-> decode FFN (tp=1):
a prefill/decode split and an attention/FFN split, four stage workers. Use this while the cost model
prefers colocated replicas for tiny models (see README.md in this folder).
"""

from __future__ import annotations

import sys

from compiler.driver import block_graph
from compiler.emit.artifacts import Options, write_plan_dir
from compiler.emit.handmade import PoolShape, handmade_plan


def main(model: str, out: str) -> None:
    shapes = [PoolShape("prefill", "prefill", tp=2), PoolShape("attn", "decode-attention"),
              PoolShape("ffn", "decode-ffn")]
    write_plan_dir(handmade_plan(block_graph(model), shapes), model, out, Options())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "llama-tiny", sys.argv[2] if len(sys.argv) > 2 else "plan-split")
