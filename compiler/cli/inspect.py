"""``gimletc inspect``: trace a model and report its blocks' FLOPs, bytes, weights and KV cache."""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from compiler.cli import options
from compiler.cli.console import output, progress_for, si, timings_line
from compiler.ir.errors import BadInput


def register(sub) -> None:
    p = sub.add_parser(
        "inspect", help="trace a model and report its blocks' FLOPs, bytes, weights and KV cache",
        description="Trace MODEL (preset, config.json path or module:callable) on the meta device, split it "
                    "into blocks (embed, per-layer attention and FFN/MoE, head) for prefill and decode, and "
                    "report each block's FLOPs and bytes at one shape and dtype. Costs are counted from the "
                    "traced aten graph: predictions of work, not measurements of time.")
    options.add_model(p, optional=True)
    p.add_argument("--list", action="store_true", help="list the preset models and exit")
    p.add_argument("--phase", choices=("prefill", "decode", "both"), default="both", help="phases to report")
    p.add_argument("--batch", type=options.positive_int, default=1, metavar="B", help="sequences per step (default 1)")
    p.add_argument("--prompt-len", type=options.positive_int, default=None, metavar="S",
                   help="prompt tokens of a prefill step (default 1024, or the model's context if shorter)")
    p.add_argument("--context-len", type=options.nonneg_int, default=None, metavar="L",
                   help="cached tokens seen by a decode step (default: the prompt length)")
    options.add_precision(p)
    p.add_argument("--layers", action="store_true", help="one row per block instead of per role")
    options.add_json(p, "the documented JSON object")
    p.add_argument("--no-cache", action="store_true", help="re-trace even if a cached trace exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.inputs.model_spec import preset_names

    if args.list:
        print("\n".join(preset_names()))
        return 0
    if not args.model:
        raise BadInput("inspect: give a MODEL (a preset such as llama-3.1-70b, a config.json path or "
                       "module:callable); `gimletc inspect --list` lists the presets")
    from compiler.driver import Timings, block_graph, stored_precision
    from compiler.trace.summarize import summarize

    prompt_len, context_len = _lengths(args.model, args.prompt_len, args.context_len)
    phases = ("prefill", "decode") if args.phase == "both" else (args.phase,)
    timings = Timings()
    graph = block_graph(args.model, phases=("prefill", "decode"), use_cache=not args.no_cache, timings=timings,
                        progress=progress_for(args))
    report = summarize(graph, precision=stored_precision(args.model, options.precision_of(args)), batch=args.batch,
                       prompt_len=prompt_len, context_len=context_len, phases=phases)
    report["timings_s"] = timings.as_dict()
    return output(report, args.json, lambda r: render(r, phases, args.layers))


def _lengths(model: str, prompt_len: int | None, context_len: int | None) -> tuple[int, int | None]:
    """The prompt and context lengths to report: the defaults within the model's context, a flag beyond it
    `BadInput` (checked before any tracing)."""
    from compiler.driver import LONG_CONTEXT_HINT, context_len as context_of

    limit = context_of(model)
    if prompt_len is None:
        prompt_len = min(1024, limit or 1024)
    elif limit and prompt_len > limit:
        raise BadInput(f"--prompt-len {prompt_len:,}: beyond {model}'s context of {limit:,} tokens "
                       f"(max_position_embeddings); give at most {limit:,}, or {LONG_CONTEXT_HINT}")
    if limit and context_len is not None and context_len >= limit:
        raise BadInput(f"--context-len {context_len:,}: a decode step after {context_len:,} cached tokens is beyond "
                       f"{model}'s context of {limit:,} tokens (max_position_embeddings); give at most "
                       f"{limit - 1:,}, or {LONG_CONTEXT_HINT}")
    return prompt_len, context_len


def _dtypes(r: dict[str, Any]) -> str:
    """The weight dtype, or the experts' and the rest's where the checkpoint stores them apart."""
    return r["dtype"] if r["dense_dtype"] == r["dtype"] else f"{r['dtype']} experts, {r['dense_dtype']} rest"


def render(r: dict[str, Any], phases: Sequence[str], per_block: bool) -> None:
    from rich.console import Console

    from compiler.cli.console import fitted_tables

    console = Console()
    console.print(
        f"[bold]{r['model']}[/bold]  {r['layers']} layers  params {si(r['params_total'])} total, "
        f"{si(r['params_active'])} active  weights {si(r['weight_bytes'], 'B')} ({_dtypes(r)})  "
        f"KV {si(r['kv_bytes_per_token'], 'B')}/token ({r['kv_dtype']}), "
        f"{si(r['kv_bytes_at_context'], 'B')} at batch {r['batch']} x {r['context_len']} tokens"
    )
    for phase in phases:
        if phase not in r:
            continue
        ph = r[phase]
        shape = f"B={r['batch']}, S={r['prompt_len']}" if phase == "prefill" else f"B={r['batch']}, L={r['context_len']}"
        title = (f"{phase} ({shape}): {si(ph['flops'], 'FLOP')}, {si(ph['bytes'], 'B')} moved, "
                 f"{si(ph['flops_per_token'], 'FLOP')}/token, intensity {ph['arithmetic_intensity']:.1f} FLOP/B")
        first = "block" if per_block else "role"
        columns = [(col, "left" if col in (first, "kind") else "right")
                   for col in (first, "n" if not per_block else "kind", "weights", "FLOPs", "moved", "w.read", "KV",
                               "act", "FLOP/B")]
        rows = []
        for row in (ph["blocks"] if per_block else ph["roles"]):
            label = row["name"] if per_block else row["role"]
            second = (row.get("attention") or row["role"]) if per_block else str(row["blocks"])
            rows.append([label, second, si(row["weight_bytes"], "B"), si(row["flops"]), si(row["bytes"], "B"),
                         si(row["weight_read_bytes"], "B"), si(row["kv_bytes"], "B"), si(row["act_bytes"], "B"),
                         f"{row['arithmetic_intensity']:.1f}"])
        console.print(title)
        for table in fitted_tables(f"{phase} {first}s", columns, rows, console.width):  # cells whole: split if wide
            console.print(table)
    if r["unaccounted"]:
        ops = sorted({f"{u['op']} ({u['phase']})" for u in r["unaccounted"]})
        console.print(f"[yellow]unaccounted ops (no cost rule, not counted): {', '.join(ops)}[/yellow]")
    else:
        console.print("every traced op has a cost rule (no unaccounted ops)")
    console.print(f"[dim]trace: {r['trace'].get('tool', '?')}, torch {r['trace'].get('torch', '?')}; "
                  f"{timings_line(r['timings_s'])}. Counts are predictions from the traced graph, not measurements.[/dim]")
