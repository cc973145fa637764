"""Tokens/s of a split plan vs the unsplit model in one process vs Hugging Face ``generate``: same CPU, same weights.

    python tools/bench_run.py [--model llama-tiny] [--requests 8] [--new-tokens 32]

Builds a split plan (prefill tp=1 -> decode attention <-> decode FFN, through
`compiler.emit.handmade`), runs it with the gloo runtime, then the unsplit model and HF ``generate`` one prompt at a time, all greedy on the
plan's weights. "Unsplit" is one colocated stage in one worker process (plus
the driver): the same code without transfers. Prints the ratios measured in this one run; asserts nothing
about time (tests never do).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from compiler.driver import block_graph
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import PoolShape, handmade_plan
    from compiler.runtime.engine import Engine, Request

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-tiny")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    prompts = [[(7 * i + 3 * j) % 500 + 3 for j in range(8 + 4 * i)] for i in range(args.requests)]
    graph = block_graph(args.model)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        split = f"{tmp}/split"
        write_plan_dir(handmade_plan(graph, [PoolShape("prefill", "prefill"), PoolShape("attn", "decode-attention"),
                                             PoolShape("ffn", "decode-ffn")]), args.model, split, Options(onnx=False))
        one = f"{tmp}/one"
        write_plan_dir(handmade_plan(graph, [PoolShape("all", "colocated")]), args.model, one, Options(onnx=False))
        for name, root in (("split plan (4 processes, gloo)", split), ("unsplit, 1 worker process", one)):
            engine = Engine(root)
            reqs = [Request(p, max_new_tokens=args.new_tokens, ignore_eos=True) for p in prompts]
            start = time.perf_counter()
            engine.run(reqs)
            results[name] = sum(len(r.tokens) for r in reqs) / (time.perf_counter() - start)
            engine.close()
        model = AutoModelForCausalLM.from_pretrained(f"{split}/model", dtype=torch.float32).eval()
        start = time.perf_counter()
        with torch.no_grad():
            for p in prompts:
                model.generate(torch.tensor([p]), max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                               do_sample=False)
        results["HF generate, one prompt at a time"] = args.requests * args.new_tokens / (time.perf_counter() - start)
    base = results["HF generate, one prompt at a time"]
    print(f"{args.model}: {args.requests} requests x {args.new_tokens} new tokens, greedy, 1 thread per process")
    for name, tps in results.items():
        print(f"  {name:40s} {tps:8.1f} tokens/s   {tps / base:5.2f}x HF generate")


if __name__ == "__main__":
    main()
