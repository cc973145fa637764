"""`gimletc bench`'s count of a stream, against the server-sent events a loaded vLLM sends (no engine needed).

vLLM's API server merges the delta outputs it has not sent yet (`RequestOutputCollector` in
vllm/v1/engine/output_processor.py), so a client that falls behind gets several tokens in one chunk. The bench
counts tokens from the stream's closing usage; counting chunks failed a sound request ("stream ended after 15 of
16", CI on 2026-12-05).
"""

from __future__ import annotations

import json

import httpx
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
