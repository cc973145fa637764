"""`gimletc bench DIR`: closed-loop load through a running deployment's router, measured with the openai client.

C clients each send a streaming completion, wait for its last token, and send
the next (the closed loop of serving benchmarks; FIELD_NOTES "Serving under
load"). Prompts are seeded random token ids of the given length (the plans
deploy without a tokenizer) and ``ignore_eos`` holds every output to its
length. Per request: TTFT is the time to the first streamed token a client
receives; TPOT is the time from the first to the last token over the tokens
after the first. Tokens are counted from the stream's closing usage
(``include_usage``), not from its chunks: an engine whose API server falls
behind merges several tokens into one chunk (vLLM's delta outputs do), so a
chunk count undercounts a loaded engine's output. A request that fails (HTTP
error, connection refused, a stream that stops short or without its usage,
no token within `request_timeout_s`) is counted as failed, with its error;
the bench ends when every request was sent, or as soon as more than
`max_failures` requests failed (a broken deployment is reported at once
rather than after every remaining request fails too).

>>> summarize([Sample(ok=True, ttft_s=0.1, tpot_s=0.01, tokens=8, start_s=0.0, end_s=0.17)], wall_s=1.0)["ttft_ms_p50"]
100.0
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path


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


def run_bench(url: str, model: str, *, concurrency: int, requests: int, input_len: int, output_len: int,
              vocab_size: int, seed: int = 0, request_timeout_s: float = 30.0,
              max_failures: int = 0) -> tuple[list[Sample], float]:
    """Closed-loop load: `concurrency` clients, `requests` requests in all. Returns the samples and wall time."""
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


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summarize(samples: list[Sample], wall_s: float) -> dict:
    """Measured figures: request counts, TTFT and TPOT percentiles (ms), output tokens/s over the wall time."""
    ok = [s for s in samples if s.ok]
    ttft = [s.ttft_s * 1e3 for s in ok]
    tpot = [s.tpot_s * 1e3 for s in ok if s.tpot_s is not None]
    errors = sorted({s.error for s in samples if not s.ok})
    return {"requests": len(samples), "succeeded": len(ok), "failed": len(samples) - len(ok),
            "ttft_ms_p50": statistics.median(ttft) if ttft else None, "ttft_ms_p90": _pct(ttft, 0.9),
            "tpot_ms_p50": statistics.median(tpot) if tpot else None, "tpot_ms_p90": _pct(tpot, 0.9),
            "output_tokens_per_s": sum(s.tokens for s in ok) / wall_s if wall_s > 0 else 0.0,
            "requests_per_s": len(ok) / wall_s if wall_s > 0 else 0.0, "wall_s": wall_s, "errors": errors[:5],
            "measured": "on this machine, through the deployment's router"}
