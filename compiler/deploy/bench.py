"""`gimletc bench DIR`: closed-loop load through a running deployment's router, measured by the engines and by
the openai client.

C clients each send a streaming completion, wait for its last token, and send
the next (the closed loop of serving benchmarks; FIELD_NOTES "Serving under
load"). Prompts are random token ids of the given length, drawn from a seed
that is new for every bench unless ``--seed`` fixes it, so no prompt repeats
one an engine has cached ([Note: fresh prompts]), and ``ignore_eos`` holds
every output to its length. A warm-up round of C requests runs first and is
left out. Per request, at the client: TTFT is the time to the first streamed
token; TPOT the time from the first to the last token over the tokens after
the first. Tokens are counted from the stream's closing usage
(``include_usage``), not from its chunks: an engine whose API server falls
behind merges several tokens into one chunk (vLLM's delta outputs do), so a
chunk count undercounts a loaded engine's output. A request that fails (HTTP
error, connection refused, a stream that stops short or without its usage,
no token within `request_timeout_s`) is counted as failed, with its error;
the bench ends when every request was sent, or as soon as more than
`max_failures` requests failed (a broken deployment is reported at once
rather than after every remaining request fails too).

[Note: the engines' own clock] The client's TPOT times chunks as they reach
it; when vLLM's output path lags it sends many tokens in one chunk, and two
identical runs read 39 ms and 0.4 ms. The engines time each
request's tokens where they are made: every engine's ``/metrics`` is scraped
before and after each run (after: once the engines count the run's finished
requests, `settled`), and the difference of its
``vllm:request_time_per_output_token_seconds`` histogram (one sample per
request, as benchmarks count TPOT; deploy --local gives it buckets fine enough
for a CPU step, [Note: engine latency histograms]) over the decode and
colocated engines is the measured TPOT. TTFT stays the client's: in a
prefill/decode split the user's first token passes both engines and the
router; each engine's own TTFT is reported beside it. A percentile is shown
only with enough requests behind it (`MIN_REQUESTS`), else left out with a
warning.

[Note: fresh prompts] Two benches of one seed send the same prompts, and the
second is served from the prefill engine's prefix cache (its log: "Prefix
cache hit rate 41.7%"): a TTFT of cached prompts, not of the plan's. Each
bench draws a new seed (reported, and ``--seed`` repeats it), the warm-up and
each ``--repeat`` run their own prompts.

>>> summarize([Sample(ok=True, ttft_s=0.1, tpot_s=0.01, tokens=8, start_s=0.0, end_s=0.17)], wall_s=1.0)["ttft_ms_p50"]
100.0
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from compiler.plan.schema import DECODE_ROLES


@dataclass(frozen=True, slots=True)
class Sample:
    ok: bool
    ttft_s: float | None
    tpot_s: float | None
    tokens: int
    start_s: float
    end_s: float
    error: str = ""


def endpoints(root: str | Path) -> dict:
    """The running deployment's ``deploy/endpoints.json`` (`compiler.deploy.local`)."""
    from compiler.ir.errors import BadInput

    path = Path(root) / "deploy" / "endpoints.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: no running deployment; start one with `gimletc deploy {root} --local`") from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e}); restart `gimletc deploy {root} --local`") from None


def one_request(client, model: str, prompt: list[int], max_tokens: int, timeout_s: float) -> Sample:
    """One streamed completion, timed at the client."""
    start = time.perf_counter()
    times, tokens = [], None
    try:
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.0,
                                           stream=True, timeout=timeout_s, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text is not None:
                times.append(time.perf_counter())
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
    except Exception as e:  # noqa: BLE001 (any client failure is a failed request, with its message)
        return Sample(False, None, None, len(times), start, time.perf_counter(), f"{type(e).__name__}: {e}"[:200])
    end = time.perf_counter()
    if tokens is None:
        return Sample(False, None, None, 0, start, end, f"stream ended without its usage ({len(times)} chunks)")
    if tokens < max_tokens or not times:
        return Sample(False, None, None, tokens, start, end, f"stream ended after {tokens} of {max_tokens} tokens")
    tpot = (times[-1] - times[0]) / (tokens - 1) if tokens > 1 else None
    return Sample(True, times[0] - start, tpot, tokens, start, end)


#: [Note: the engines' own clock] The fewest requests a percentile is shown from: the 90th of 9 requests is
#: their largest, and the 99th of 99 too.
MIN_REQUESTS = {"p50": 1, "p90": 10, "p99": 100}


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine of the deployment: its pool, that pool's role, and its URL."""

    pool: str
    role: str
    url: str


def engines_of(info: dict, roles: dict[str, str]) -> list[Engine]:
    """The engines in ``endpoints.json`` `info` whose pool is in `roles` (pool -> role; routers are not)."""
    return [Engine(p["pool"], roles[p["pool"]], p["url"]) for p in info.get("processes", []) if p["pool"] in roles]


def scrape(engines: list[Engine], timeout_s: float = 10.0) -> dict[str, object]:
    """Each engine's ``/metrics`` now (`compiler.deploy.metrics.Snapshot`), by URL; an engine that does not answer
    is left out (its figures then come from the client alone)."""
    from compiler.ir.errors import BadInput
    from compiler.deploy.metrics import parse

    out = {}
    for e in engines:
        try:
            with urllib.request.urlopen(f"{e.url}/metrics", timeout=timeout_s) as r:
                out[e.url] = parse(r.read().decode(), f"{e.url}/metrics", pool=e.pool)
        except (OSError, ValueError, BadInput):  # noqa: PERF203 (one engine down leaves the others' figures)
            out[e.url] = None
    return out


#: Seconds `settled` waits for the engines to count a run's last requests.
SETTLE_S = 2.0


def settled(engines: list[Engine], before: dict, finished: int) -> dict:
    """A scrape once the decoding engines' TPOT histograms count the `finished` requests since `before`, or after
    `SETTLE_S` (an engine that exports none costs that wait): an engine records a request when it finishes, which
    can come after the client has read its last token, so a scrape taken at once can leave it to the next run."""
    after = scrape(engines)
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        counted = engine_deltas(engines, before, after, "request_tpot_s", DECODE_ROLES)
        if counted is not None and counted.count >= finished:
            break
        time.sleep(0.05)
        after = scrape(engines)
    return after


def _histogram(snapshot, quantity: str):
    """`quantity`'s histogram in `snapshot`, summed over its pools; None when the engine exports none."""
    found = [h for (q, _pool), h in snapshot.histograms if q == quantity]
    if not found:
        return None
    total = found[0]
    for h in found[1:]:
        total = total.plus(h)
    return total


def engine_deltas(engines: list[Engine], before: dict, after: dict, quantity: str, roles: tuple[str, ...]):
    """The sum over the engines of `roles` of `quantity`'s histogram between the scrapes `before` and `after`;
    None when no such engine answered both times with that histogram."""
    total = None
    for e in engines:
        if e.role not in roles or before.get(e.url) is None or after.get(e.url) is None:
            continue
        h1 = _histogram(after[e.url], quantity)
        if h1 is None:
            continue
        d = h1.minus(_histogram(before[e.url], quantity))
        total = d if total is None else total.plus(d)
    return total


def run_bench(url: str, model: str, *, concurrency: int, requests: int, input_len: int, output_len: int,
              vocab_size: int, seed: int = 0, request_timeout_s: float = 30.0,
              max_failures: int = 0) -> tuple[list[Sample], float]:
    """Closed-loop load: `concurrency` clients, `requests` requests in all, prompts drawn from `seed`. Returns the
    samples and wall time."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab_size) for _ in range(input_len)] for _ in range(requests)]
    samples: list[Sample] = []
    lock = threading.Lock()
    next_index = iter(range(requests))
    t0 = time.perf_counter()

    def client_loop() -> None:
        while True:
            with lock:
                i = next(next_index, None)
                failing = sum(not s.ok for s in samples) > max_failures
            if i is None or failing:
                return
            s = one_request(client, model, prompts[i], output_len, request_timeout_s)
            with lock:
                samples.append(s)

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, time.perf_counter() - t0


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` percentile of `values` (not empty): the smallest value with at least q of them at or
    below it.

    >>> percentile([4.0, 1.0, 3.0, 2.0], 0.5), percentile([4.0, 1.0, 3.0, 2.0], 0.9)
    (2.0, 4.0)
    """
    values = sorted(values)
    return values[max(0, math.ceil(q * len(values)) - 1)]


def stats(values: list[float] | None = None, histogram=None, scale: float = 1e3) -> dict:
    """p50/p90/p99 (times `scale`) and the count, of `values` or of a `histogram`'s samples (read as Prometheus's
    ``histogram_quantile`` does); a percentile with fewer requests behind it than `MIN_REQUESTS` is None."""
    n = len(values) if values is not None else int(round(histogram.count)) if histogram is not None else 0
    out: dict = {"n": n}
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        if n < max(MIN_REQUESTS[key], 1):
            out[key] = None
        elif values is not None:
            out[key] = percentile(values, q) * scale
        else:
            out[key] = histogram.quantile(q) * scale
    return out


def summarize(samples: list[Sample], wall_s: float, engine: dict | None = None) -> dict:
    """Measured figures of one run (or several pooled): request counts, TTFT and TPOT percentiles (ms) with the
    number of requests behind them, output tokens/s over the wall time. `engine`: the engines' own figures
    (``tpot_ms`` and ``ttft_ms`` by role, each `stats`), whose TPOT is preferred to the client's ([Note: the
    engines' own clock])."""
    ok = [s for s in samples if s.ok]
    client = {"ttft_ms": stats([s.ttft_s for s in ok]),
              "tpot_ms": stats([s.tpot_s for s in ok if s.tpot_s is not None])}
    engine = engine or {}
    tpot_source = "engine" if (engine.get("tpot_ms") or {}).get("n") else "client"
    tpot = engine["tpot_ms"] if tpot_source == "engine" else client["tpot_ms"]
    warnings = []
    for name, figure in (("TTFT", client["ttft_ms"]), ("TPOT", tpot)):
        for key in ("p90", "p99"):
            if figure["n"] and figure[key] is None:
                warnings.append(f"{name} {key} left out: {figure['n']} requests, at least {MIN_REQUESTS[key]} "
                                f"needed (--requests)")
    if tpot_source == "engine" and tpot["n"] != len(ok):
        warnings.append(f"the engines timed {tpot['n']} requests' TPOT where the bench completed {len(ok)}: other "
                        "traffic reached them, or a request was timed twice")
    if tpot_source == "client" and ok:
        warnings.append("TPOT from the client's chunk times: no decoding engine's /metrics answered with "
                        "vllm:request_time_per_output_token_seconds ([Note: the engines' own clock])")
    errors = sorted({s.error for s in samples if not s.ok})
    return {"requests": len(samples), "succeeded": len(ok), "failed": len(samples) - len(ok),
            **{f"ttft_ms_{k}": client["ttft_ms"][k] for k in ("p50", "p90", "p99")},
            **{f"tpot_ms_{k}": tpot[k] for k in ("p50", "p90", "p99")},
            "ttft_source": "client", "tpot_source": tpot_source,
            "output_tokens_per_s": sum(s.tokens for s in ok) / wall_s if wall_s > 0 else 0.0,
            "requests_per_s": len(ok) / wall_s if wall_s > 0 else 0.0, "wall_s": wall_s,
            "client": client, "engine": engine, "warnings": warnings, "errors": errors[:5],
            "measured": "on this machine, through the deployment's router"}


def engine_figures(engines: list[Engine], before: dict, after: dict) -> dict:
    """The engines' own figures between two scrapes: TPOT over the decoding engines, TTFT by role."""
    out: dict = {}
    tpot = engine_deltas(engines, before, after, "request_tpot_s", DECODE_ROLES)
    if tpot is not None:
        out["tpot_ms"] = stats(histogram=tpot)
    for role in sorted({e.role for e in engines}):
        ttft = engine_deltas(engines, before, after, "ttft_s", (role,))
        if ttft is not None:
            out.setdefault("ttft_ms_by_role", {})[role] = stats(histogram=ttft)
    return out


#: The figures whose spread between runs `bench --repeat` reports.
SPREAD = ("ttft_ms_p50", "tpot_ms_p50", "output_tokens_per_s")


def spread(runs: list[dict]) -> dict:
    """Each `SPREAD` figure's smallest and largest value over `runs`, and their ratio.

    >>> spread([{"ttft_ms_p50": 10.0, "tpot_ms_p50": 2.0, "output_tokens_per_s": 5.0},
    ...         {"ttft_ms_p50": 12.5, "tpot_ms_p50": 2.0, "output_tokens_per_s": 4.0}])["ttft_ms_p50"]
    {'min': 10.0, 'max': 12.5, 'ratio': 1.25}
    """
    out = {}
    for key in SPREAD:
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            lo, hi = min(values), max(values)
            out[key] = {"min": lo, "max": hi, "ratio": hi / lo if lo > 0 else None}
    return out


def bench(url: str, model: str, engines: list[Engine], *, concurrency: int, requests: int, input_len: int,
          output_len: int, vocab_size: int, seed: int, repeat: int = 1, warmup: int = 0,
          request_timeout_s: float = 30.0, max_failures: int = 0, note=lambda _m: None) -> dict:
    """`repeat` runs of `requests` closed-loop requests after `warmup` left-out ones, each run measured by the
    engines (scraped before and after it) and by the client: every run's figures, all runs pooled, and the
    spread between runs. Run ``k`` draws its prompts from ``seed + k + 1`` (the warm-up from `seed`)."""
    kw = dict(concurrency=concurrency, input_len=input_len, output_len=output_len, vocab_size=vocab_size,
              request_timeout_s=request_timeout_s, max_failures=max_failures)
    before = scrape(engines)
    if warmup:
        note(f"warm-up: {warmup} requests, left out")
        samples, _wall = run_bench(url, model, requests=warmup, seed=seed, **kw)
        if any(not s.ok for s in samples):
            return {"runs": [], "measured": summarize(samples, _wall), "spread": {}, "failed_in": "warm-up"}
        before = settled(engines, before, len(samples))
    runs, pooled, walls, tpot_hist, first = [], [], 0.0, None, None
    for k in range(repeat):
        note(f"run {k + 1} of {repeat}: {requests} requests at concurrency {concurrency}")
        first = first or before
        samples, wall = run_bench(url, model, requests=requests, seed=seed + k + 1, **kw)
        after = settled(engines, before, sum(s.ok for s in samples))
        runs.append(summarize(samples, wall, engine_figures(engines, before, after)))
        before = after
        pooled += samples
        walls += wall
        if runs[-1]["failed"]:
            break
    # pooled: the engines' histograms from before the first run to after the last (no other traffic between)
    measured = summarize(pooled, walls, engine_figures(engines, first or {}, after if runs else {}))
    return {"runs": runs, "measured": measured, "spread": spread(runs) if len(runs) > 1 else {}}
