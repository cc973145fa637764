"""``gimletc run DIR``: execute a compiled plan on this machine: a driver and one worker process per stage instance.

Prompts are token ids (``--prompt-ids 1,2,3`` or ``--requests FILE.jsonl``, one
JSON object per line: ``prompt_ids``, optional ``max_new_tokens``,
``temperature``, ``top_p``, ``seed``, ``ignore_eos``). Prints each request's
tokens, then the measured wall time per stage and bytes per transfer kind
next to the plan's predictions, and for a plan with a drafter pool the
acceptance rate and tokens per verification of speculative decoding next to
what the plan's assumed acceptance rate implies (`compiler.runtime.report`).
Also here: the ``compile`` options that shape the runnable artifacts
(`add_artifact_options`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compiler.cli import options
from compiler.cli.serve import add_worker_options, engine_options
from compiler.ir.errors import BadInput


def add_artifact_options(p: argparse.ArgumentParser) -> None:
    """``compile``'s options for stage programs, weight shards and ONNX (`compiler.emit.artifacts`)."""
    p.add_argument("--weights", metavar="DIR", help="slice weights from this local Hugging Face checkpoint folder "
                                                     "(default: random weights from the config, seed 0)")
    p.add_argument("--run-dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="dtype of the emitted stage programs and shards (default fp32: CPU runs are checked "
                        "against Hugging Face in fp32; the placement is costed at --dtype)")
    p.add_argument("--no-onnx", action="store_true", help="skip the ONNX export of each stage")
    p.add_argument("--draft-weights", metavar="DIR", help="slice drafter pools' weights from this local checkpoint "
                                                           "of the draft model (default: seeded random weights)")


def artifact_options(args: argparse.Namespace):
    from compiler.emit.artifacts import Options

    return Options(weights_dir=args.weights, run_dtype=args.run_dtype, onnx=not args.no_onnx,
                   draft_weights_dir=getattr(args, "draft_weights", None))


def register(sub) -> None:
    p = sub.add_parser("run", help="execute a compiled plan here: driver + one worker process per stage",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-ids", metavar="1,2,3", help="one prompt as comma-separated token ids")
    src.add_argument("--requests", metavar="FILE.jsonl", help="one request per line (prompt_ids, max_new_tokens, ...)")
    p.add_argument("--max-new-tokens", type=options.positive_int, default=16, help="tokens to generate (default 16)")
    p.add_argument("--temperature", type=_temperature, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=_top_p, default=1.0, help="nucleus sampling mass in (0, 1] (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (request i uses seed + i)")
    add_worker_options(p)
    p.add_argument("--json", action="store_true", help="print results and measurements as JSON")
    p.set_defaults(func=run)


def _temperature(text: str) -> float:
    from compiler.runtime.sampling import sampling_problems

    value = _float(text)
    if sampling_problems(temperature=value, top_p=1.0):
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 (greedy) or a positive number")
    return value


def _top_p(text: str) -> float:
    from compiler.runtime.sampling import sampling_problems

    value = _float(text)
    if sampling_problems(temperature=0.0, top_p=value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number in (0, 1], e.g. 0.9")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number") from None


def _checked(requests: list, where: str, limits: tuple[int, int]) -> list:
    """Refuse, before any worker starts, a request that cannot run: its generation parameters, its token ids
    against the model's vocabulary and its length against the model's context (`Request.problems`)."""
    for i, r in enumerate(requests):
        problems = r.problems(*limits)
        if problems:
            raise BadInput(f"{where}" + (f", request {i + 1}" if len(requests) > 1 else "") + ": " + "; ".join(problems))
    return requests


def _limits(plan: str) -> tuple[int, int]:
    """The plan's model's vocabulary size and context, from ``DIR/model/config.json`` (no worker needed)."""
    from compiler.runtime.engine import model_limits

    path = Path(plan) / "model" / "config.json"
    try:
        return model_limits(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError) as e:
        from compiler.runtime.plan_dir import open_plan_dir

        open_plan_dir(plan)  # says what is wrong with the plan directory, if that is it
        raise BadInput(f"{plan}: cannot read the model's config ({path}: {type(e).__name__}: {e}); recompile the "
                       "plan with gimletc compile --out DIR") from None


def _requests(args: argparse.Namespace) -> list:
    from compiler.runtime.engine import Request

    limits = _limits(args.plan)
    common = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)
    if args.prompt_ids is not None:
        try:
            ids = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
        except ValueError:
            raise BadInput(f"--prompt-ids {args.prompt_ids!r}: give comma-separated integers, e.g. 1,2,3") from None
        return _checked([Request(ids, seed=args.seed, **common)], "--prompt-ids", limits)
    out = []
    path = Path(args.requests)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise BadInput(f"--requests {path}: cannot read ({e.strerror})") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            fields = {**common, **{k: obj[k] for k in ("max_new_tokens", "temperature", "top_p", "ignore_eos")
                                   if k in obj}}
            out.append(Request([int(t) for t in obj["prompt_ids"]], seed=int(obj.get("seed", args.seed + i)),
                               **fields))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise BadInput(f"--requests {path}, line {i + 1}: {type(e).__name__} {e}; each line needs "
                           f"{{\"prompt_ids\": [1, 2, 3]}} and optional max_new_tokens, temperature, top_p, seed") from None
    if not out:
        raise BadInput(f"--requests {path}: no requests in the file")
    return _checked(out, f"--requests {path}", limits)


def run(args: argparse.Namespace) -> int:
    from compiler.runtime.engine import Engine
    from compiler.runtime.report import run_report

    requests = _requests(args)
    engine = Engine(args.plan, **engine_options(args))
    try:
        engine.run(requests)
        report = run_report(engine, requests)
    finally:
        engine.close()
    if args.json:
        json.dump(report, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        render(report)
    return 0


def render(report: dict) -> None:
    from rich.console import Console

    from compiler.cli.console import fitted_tables

    console = Console()
    for line in report["execution"]:
        console.print(f"[yellow]{line}[/yellow]")
    for r in report["requests"]:
        console.print(f"{r['id']}: prompt {r['prompt_tokens']} tokens -> {r['tokens']} ({r['finish_reason']}, "
                      f"TTFT {r['ttft_ms']:.1f} ms)")
    # Cells are never cut (stage names tell the stages apart): a table too wide is split (`fitted_tables`).
    left = ("stage", "role", "device", "execution")
    columns = [(c, "left" if c in left else "right") for c in (*left, "prefill s", "decode s", "steps",
                                                               "predicted TTFT ms", "predicted TPOT ms")]
    rows = [[s["stage"], s["role"], s["device"], s["execution"], f"{s['compute_s'].get('prefill', 0):.4f}",
             f"{s['compute_s'].get('decode', 0):.4f}", str(s["steps"]),
             "-" if s["predicted_ttft_ms"] is None else f"{s['predicted_ttft_ms']:.1f}",
             "-" if s["predicted_tpot_ms"] is None else f"{s['predicted_tpot_ms']:.1f}"] for s in report["stages"]]
    for table in fitted_tables("stages: measured wall time here vs the plan's prediction", columns, rows,
                               console.width):
        console.print(table)
    columns = [(c, "left" if c in ("kind", "how predicted") else "right")
               for c in ("kind", "measured bytes", "predicted bytes", "how predicted")]
    rows = [[t["kind"], f"{t['measured_bytes']:,}", "-" if t["predicted_bytes"] is None else
             f"{t['predicted_bytes']:,}", t["how"]] for t in report["transfers"]]
    for table in fitted_tables("transfers: measured bytes vs the plan's prediction", columns, rows, console.width):
        console.print(table)
    if report["speculative"]:
        render_speculative(console, report["speculative"])
    m = report["measured"]
    console.print(f"measured here: {m['output_tokens']} tokens in {m['wall_s']:.2f} s "
                  f"({m['output_tokens_per_s']:.1f} tokens/s); predictions are the plan's, for its devices")


def render_speculative(console, rows: list[dict]) -> None:
    from compiler.cli.console import fitted_tables

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    names = ("unit", "drafter", "k", "verifications", "acceptance", "tokens/verification", "predicted acceptance",
             "predicted tokens/verification")
    columns = [(c, "left" if c in ("unit", "drafter") else "right") for c in names]
    cells = [[s["unit"], s["drafter"], str(s["k"]), str(s["verifications"]), num(s["acceptance_rate"], ".2f"),
              num(s["tokens_per_verification"], ".2f"), num(s["predicted_acceptance_rate"], ".2f"),
              num(s["predicted_tokens_per_verification"], ".2f")] for s in rows]
    for table in fitted_tables("speculative decoding: measured here vs the plan's assumed acceptance (a prediction)",
                               columns, cells, console.width):
        console.print(table)
