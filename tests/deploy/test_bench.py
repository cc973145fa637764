"""`gimletc bench`'s count of a stream, against the server-sent events a loaded vLLM sends (no engine needed).

vLLM's API server merges the delta outputs it has not sent yet (`RequestOutputCollector` in
vllm/v1/engine/output_processor.py), so a client that falls behind gets several tokens in one chunk. The bench
counts tokens from the stream's closing usage; counting chunks failed a sound request ("stream ended after 15 of
16", CI on 2026-12-05).
"""

from __future__ import annotations

import json

import httpx
import pytest
from openai import OpenAI

from compiler.deploy.bench import one_request


def _client(chunks: list[str], *, usage: int | None) -> OpenAI:
    """An OpenAI client whose server streams `chunks` (one text delta each) and then, if given, its usage."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["stream"] and body["stream_options"] == {"include_usage": True}
        events = [{"id": "c", "object": "text_completion", "created": 0, "model": "m",
                   "choices": [{"index": 0, "text": text, "finish_reason": None, "logprobs": None}]}
                  for text in chunks]
        if usage is not None:
            events.append({"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [],
                           "usage": {"prompt_tokens": 4, "completion_tokens": usage, "total_tokens": 4 + usage}})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    return OpenAI(base_url="http://engine/v1", api_key="none", max_retries=0,
                  http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def test_a_chunk_carrying_two_tokens_counts_two():
    # 16 tokens in 15 chunks: the fifth chunk carries two merged deltas.
    chunks = [f"t{i}" for i in range(4)] + ["t4t5"] + [f"t{i}" for i in range(6, 16)]
    s = one_request(_client(chunks, usage=16), "m", [1, 2, 3, 4], 16, 5.0)
    assert s.ok and s.tokens == 16, s.error


def test_a_stream_short_of_its_tokens_fails_with_the_count():
    s = one_request(_client([f"t{i}" for i in range(15)], usage=15), "m", [1, 2, 3, 4], 16, 5.0)
    assert not s.ok and s.error == "stream ended after 15 of 16 tokens"


def test_a_stream_without_usage_fails_and_says_so():
    s = one_request(_client([f"t{i}" for i in range(16)], usage=None), "m", [1, 2, 3, 4], 16, 5.0)
    assert not s.ok and "without its usage" in s.error


# ------------------------------------------------ the engines' own clock, against a stand-in that bursts its stream

#: The stand-in engine's time to first token and time per output token (seconds), as its /metrics record them.
TTFT_S, STEP_S = 0.02, 0.005


def _stand_in_engine(prompts: list, record_after_s: float = 0.0):
    """An engine and router in one: each streamed completion waits `TTFT_S`, then `STEP_S` per further token, and
    sends every token in one chunk at the end (a lagging output path); its /metrics (vLLM's names, deploy's
    buckets) time each request as the engine would: TTFT `TTFT_S`, TPOT `STEP_S`, recorded `record_after_s` after
    the response is sent. Records each prompt it got."""
    import http.server
    import threading
    import time

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from compiler.deploy.launch import FINE_BUCKETS

    registry = CollectorRegistry()
    tpot = Histogram("vllm:request_time_per_output_token_seconds", "per request", ["model_name"],
                     buckets=FINE_BUCKETS["inter_token_latency"], registry=registry)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"],
                     buckets=FINE_BUCKETS["time_to_first_token"], registry=registry)
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self):
            with lock:
                body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = req["max_tokens"]
            with lock:
                prompts.append(tuple(req["prompt"]))
            time.sleep(TTFT_S + STEP_S * (n - 1))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            events = [{"id": "c", "object": "text_completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "text": " x" * n, "finish_reason": "length", "logprobs": None}]},
                      {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [],
                       "usage": {"prompt_tokens": len(req["prompt"]), "completion_tokens": n,
                                 "total_tokens": len(req["prompt"]) + n}}]
            self.wfile.write(("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode())
            self.wfile.flush()
            time.sleep(record_after_s)
            with lock:
                ttft.labels("m").observe(TTFT_S)
                tpot.labels("m").observe(STEP_S)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_each_run_counts_its_own_requests_when_the_engine_records_them_late():
    """An engine that records each request 0.3 s after its last token (HTTP/1.0: the client has its answer when
    the body is flushed, before the handler returns): every run's TPOT histogram still counts exactly its own 6
    requests, none left to the next run, and the warm-up's none."""
    from compiler.deploy.bench import Engine, bench

    server, url = _stand_in_engine([], record_after_s=0.3)
    try:
        out = bench(url, "m", [Engine("pool0", "decode", url)], concurrency=2, requests=6, input_len=16,
                    output_len=8, vocab_size=1000, seed=3, repeat=3, warmup=2)
    finally:
        server.shutdown()
    assert [r["engine"]["tpot_ms"]["n"] for r in out["runs"]] == [6, 6, 6]
    assert out["measured"]["engine"]["tpot_ms"]["n"] == 18


def test_bench_reads_tpot_from_the_engines_histograms_not_the_bursting_stream():
    """[Note: the engines' own clock]: an engine that sends all 8 tokens in one chunk reads as TPOT 0 at the
    client; the bench reads the engine's histogram. Every request's 5 ms falls in deploy's bucket (4.5, 5] ms, so
    the histogram's p50 interpolates to 4.75 ms and its p90 to 4.95 (hand arithmetic), over exactly the run's
    requests (the warm-up and the other run left out); a p99 of 12 requests is withheld with a warning; an engine
    that does not answer is left out, and the prefill engine's TTFT is not the decode engine's."""
    from compiler.deploy.bench import Engine, bench

    prompts: list = []
    server, url = _stand_in_engine(prompts)
    try:
        engines = [Engine("pool1", "decode", url), Engine("pool0", "prefill", "http://127.0.0.1:9")]
        out = bench(url, "m", engines, concurrency=3, requests=12, input_len=16, output_len=8, vocab_size=1000,
                    seed=7, repeat=2, warmup=3)
    finally:
        server.shutdown()
    assert len(out["runs"]) == 2
    for m in (*out["runs"], out["measured"]):
        assert m["failed"] == 0 and m["tpot_source"] == "engine"
        assert m["client"]["tpot_ms"]["p50"] == 0.0  # what the client sees of a burst
        assert m["tpot_ms_p50"] == pytest.approx(4.75) and m["tpot_ms_p90"] == pytest.approx(4.95)
        assert m["engine"]["ttft_ms_by_role"]["decode"]["p50"] == pytest.approx(18.75)  # (17.5, 20] ms bucket
        assert "prefill" not in m["engine"]["ttft_ms_by_role"]
        assert m["client"]["ttft_ms"]["p50"] >= (TTFT_S + 7 * STEP_S) * 1e3  # the burst: first token with the last
    assert [r["engine"]["tpot_ms"]["n"] for r in out["runs"]] == [12, 12]
    assert out["measured"]["engine"]["tpot_ms"]["n"] == 24
    assert out["runs"][0]["tpot_ms_p99"] is None and any("p99" in w for w in out["runs"][0]["warnings"])
    assert out["spread"]["tpot_ms_p50"]["ratio"] == pytest.approx(1.0)
    assert len(prompts) == 27 and len(set(prompts)) == 27  # warm-up and both runs: no prompt sent twice


def test_percentiles_with_too_few_requests_are_withheld():
    """Nearest rank by hand: of 1..9 the p50 is 5 and the p90 (9 requests, 10 needed) is withheld; of 1..10 the
    p90 is 9."""
    from compiler.deploy.bench import stats

    nine = stats([i / 1e3 for i in range(1, 10)])
    assert (nine["p50"], nine["p90"], nine["n"]) == (pytest.approx(5.0), None, 9)
    assert stats([i / 1e3 for i in range(1, 11)])["p90"] == pytest.approx(9.0)
