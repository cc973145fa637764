"""The serving front: an OpenAI-compatible HTTP API (FastAPI + uvicorn) over a running plan.

One thread owns the `Engine` (the driver) and runs its scheduling loop;
HTTP handlers hand it requests through a queue and receive tokens through
per-request asyncio queues. Endpoints: ``/v1/completions`` and
``/v1/chat/completions`` (JSON, or SSE chunks ending in ``data: [DONE]``;
``stream_options.include_usage`` adds a last chunk with ``usage``),
``/v1/models``, ``/health`` and ``/metrics`` (Prometheus text: requests waiting
and running, KV-cache use, TTFT / TPOT / end-to-end histograms, token counters,
bytes per transfer kind as counted by the workers, speculative decoding's
drafted and accepted tokens).

The workers are spawned here, or awaited when they run elsewhere (``external``:
Kubernetes pods; [Note: rendezvous] in compiler/runtime/launch.py).

Prompts: with a tokenizer in ``DIR/model/`` text is tokenized; without one a
prompt is token ids (a JSON list, or a string of integers), and each choice
carries ``token_ids`` next to a text of space-separated ids.

If a worker dies or hangs, every in-flight request gets an error (an HTTP 500
body, or an SSE ``error`` event before ``[DONE]``), ``/health`` turns 503 and
new requests are refused with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from compiler.ir.errors import BadInput, GimletError
from compiler.runtime.engine import Engine, Request

_DONE = object()


class ServingLoop:
    """The engine's thread: admits submitted requests, steps the engine, reports tokens and failures."""

    def __init__(self, root: str | Path, **engine_options) -> None:
        self.engine = Engine(root, **engine_options)
        self.inbox: queue.Queue = queue.Queue()
        self.failure: str | None = None
        self.inflight: dict[str, tuple[Request, Any, asyncio.AbstractEventLoop]] = {}
        self.stats: dict[str, int] = {}
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="gimletc-engine", daemon=True)
        self.thread.start()

    def submit(self, req: Request, out: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
        self.inbox.put(("request", (req, out, loop)))

    def _emit(self, req: Request, item: Any) -> None:
        _, out, loop = self.inflight[req.id]
        loop.call_soon_threadsafe(out.put_nowait, item)

    def _loop(self) -> None:
        last_stats = 0.0
        try:
            while not self.stopping:
                self._drain(block=not self.engine.busy())
                if self.engine.busy():
                    self.engine.step()
                    for rid, (req, _, _) in list(self.inflight.items()):
                        if req.finish_reason is not None:
                            self._emit(req, _DONE)
                            del self.inflight[rid]
                if time.monotonic() - last_stats > 2.0:
                    self._refresh_stats()
                    last_stats = time.monotonic()
        except GimletError as e:
            self.failure = str(e)
            for req, _, _ in list(self.inflight.values()):
                self._emit(req, e)
            self.inflight.clear()

    def _refresh_stats(self) -> None:
        totals: dict[str, int] = {}
        for s in self.engine.worker_stats().values():
            for kind, n in s["bytes"].items():
                totals[kind] = totals.get(kind, 0) + n
        self.stats = totals

    def _drain(self, block: bool) -> None:
        try:
            kind, item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            req, out, loop = item
            req.on_token = lambda r, token: self._emit(r, token)
            try:
                self.engine.submit(req)
                self.inflight[req.id] = (req, out, loop)
            except BadInput as e:
                loop.call_soon_threadsafe(out.put_nowait, e)
            try:
                kind, item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        """Stop the engine's thread and the workers (the workers get ``stop`` and leave); safe to call twice."""
        self.stopping = True
        self.thread.join(timeout=10)
        if self.failure is None:
            self.engine.close()


def _metrics(loop: ServingLoop):
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    reg = CollectorRegistry()
    buckets = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
    m = {
        "ttft": Histogram("gimletc_time_to_first_token_seconds", "time to first token", registry=reg, buckets=buckets),
        "tpot": Histogram("gimletc_time_per_output_token_seconds", "time per output token after the first",
                          registry=reg, buckets=buckets),
        "e2e": Histogram("gimletc_e2e_request_latency_seconds", "end-to-end request latency", registry=reg,
                         buckets=buckets),
        "prompt": Counter("gimletc_prompt_tokens", "prompt tokens processed", registry=reg),
        "generated": Counter("gimletc_generation_tokens", "tokens generated", registry=reg),
    }
    engine = loop.engine
    Gauge("vllm:num_requests_waiting", "requests waiting to be admitted", registry=reg).set_function(
        lambda: len(engine.waiting))
    Gauge("vllm:num_requests_running", "requests being decoded", registry=reg).set_function(
        lambda: sum(len(v) for v in engine.running.values()))
    Gauge("vllm:kv_cache_usage_perc", "fraction of decode KV capacity (batch slots) in use", registry=reg).set_function(
        lambda: sum(len(v) for v in engine.running.values()) / max(1, sum(u.batch for u in engine.units)))
    transfer = Gauge("gimletc_transfer_bytes", "bytes moved between stages, by transfer kind (measured by the "
                     "workers)", ["kind"], registry=reg)
    for kind in ("kv_pages", "hidden_states", "draft_tokens"):
        transfer.labels(kind=kind).set_function(lambda k=kind: loop.stats.get(k, 0))
    spec = Gauge("gimletc_spec_decode_tokens", "speculative decoding, all units: tokens drafted, drafts accepted, "
                 "verifications", ["what"], registry=reg)
    for what, field in (("drafted", "drafted"), ("accepted", "accepted"), ("verifications", "verifications")):
        spec.labels(what=what).set_function(lambda f=field: sum(getattr(s, f) for s in engine.spec.values()))
    return reg, m


def _observe(m: dict, req: Request) -> None:
    m["prompt"].inc(len(req.prompt))
    m["generated"].inc(len(req.tokens))
    if req.first_token_s is not None:
        m["ttft"].observe(req.first_token_s - req.arrived_s)
        end = req.done_s or time.perf_counter()
        if len(req.tokens) > 1:
            m["tpot"].observe((end - req.first_token_s) / (len(req.tokens) - 1))
        m["e2e"].observe(end - req.arrived_s)


class _Tokens:
    """Text <-> ids: the tokenizer in DIR/model/ when present, else token ids written as integers."""

    def __init__(self, root: Path) -> None:
        self.tokenizer = None
        if (root / "model" / "tokenizer.json").is_file() or (root / "model" / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(root / "model"), local_files_only=True)

    def encode(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return prompt
        if isinstance(prompt, str):
            if self.tokenizer is not None:
                return self.tokenizer.encode(prompt)
            try:
                return [int(t) for t in prompt.replace(",", " ").split()]
            except ValueError:
                pass
        raise BadInput("prompt: this plan has no tokenizer in DIR/model/; give token ids (a list of integers, or "
                       "a string of integers separated by spaces)")

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        return "".join(f" {t}" for t in ids)


def build_app(loop: ServingLoop, root: Path, model_name: str):
    from fastapi import FastAPI, Request as HttpRequest
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn re-raises SIGTERM / SIGINT once it has shut down, which would end the process before `serve`'s
        # own cleanup: stop the workers here, while shutting down.
        await asyncio.get_running_loop().run_in_executor(None, loop.close)

    app = FastAPI(title="gimletc", version="1", lifespan=lifespan)
    registry, m = _metrics(loop)
    tokens = _Tokens(root)

    def error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.get("/health")
    def health():
        if loop.failure is not None:
            return error(503, loop.failure, "runtime_failure")
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics():
        return PlainTextResponse(generate_latest(registry).decode(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "gimletc"}]}

    async def generate(body: dict, chat: bool):
        if loop.failure is not None:
            return error(503, f"the plan's workers failed: {loop.failure}", "runtime_failure")
        try:
            prompt = body["messages"][-1]["content"] if chat else body.get("prompt")
            if chat and tokens.tokenizer is not None and getattr(tokens.tokenizer, "chat_template", None):
                ids = tokens.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True)
            else:
                ids = tokens.encode(prompt)
        except (KeyError, IndexError, TypeError):
            return error(400, "body: give 'prompt' (completions) or 'messages' (chat)", "invalid_request_error")
        except BadInput as e:
            return error(400, str(e), "invalid_request_error")
        req = Request(ids, max_new_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 16),
                      temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
                      top_p=float(body.get("top_p") if body.get("top_p") is not None else 1.0),
                      seed=int(body.get("seed") or 0), ignore_eos=bool(body.get("ignore_eos", False)))
        out: asyncio.Queue = asyncio.Queue()
        loop.submit(req, out, asyncio.get_running_loop())
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
        if body.get("stream"):
            return StreamingResponse(_stream(out, req, rid, chat, usage_wanted), media_type="text/event-stream")
        while True:
            item = await out.get()
            if isinstance(item, Exception):
                return error(400 if isinstance(item, BadInput) else 500, str(item),
                             "invalid_request_error" if isinstance(item, BadInput) else "runtime_failure")
            if item is _DONE:
                break
        _observe(m, req)
        text = tokens.decode(req.tokens)
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat else
                  {"index": 0, "text": text, "logprobs": None})
        return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": model_name, "choices": [{**choice, "finish_reason": req.finish_reason,
                                                  "token_ids": req.tokens}],
                "usage": _usage(req)}

    async def _stream(out: asyncio.Queue, req: Request, rid: str, chat: bool, usage_wanted: bool):
        kind = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": rid, "object": kind, "created": int(time.time()), "model": model_name}
        if chat:
            yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
        while True:
            item = await out.get()
            if isinstance(item, Exception):
                yield _sse({"error": {"message": str(item), "type": "runtime_failure", "code": 500}})
                break
            if item is _DONE:
                yield _sse({**base, "choices": [{"index": 0, **({"delta": {}} if chat else {"text": ""}),
                                                 "finish_reason": req.finish_reason}]})
                _observe(m, req)
                if usage_wanted:
                    yield _sse({**base, "choices": [], "usage": _usage(req)})
                break
            text = tokens.decode([item])
            piece = {"delta": {"content": text}} if chat else {"text": text}
            yield _sse({**base, "choices": [{"index": 0, **piece, "finish_reason": None, "token_ids": [item]}]})
        yield "data: [DONE]\n\n"

    async def completions(http):
        return await generate(await http.json(), chat=False)

    async def chat_completions(http):
        return await generate(await http.json(), chat=True)

    for path, handler in (("/v1/completions", completions), ("/v1/chat/completions", chat_completions)):
        handler.__annotations__["http"] = HttpRequest  # a real class: annotations are strings in this module
        app.post(path)(handler)

    return app


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _usage(req: Request) -> dict:
    return {"prompt_tokens": len(req.prompt), "completion_tokens": len(req.tokens),
            "total_tokens": len(req.prompt) + len(req.tokens)}


def serve(root: str | Path, *, host: str = "127.0.0.1", port: int = 8000, **engine_options) -> int:
    """Start the workers (or wait for them: ``external=True``), then serve until interrupted; returns the exit code
    (4 if the workers failed). `engine_options` are `Engine`'s (stage and start timeouts, external)."""
    import uvicorn

    loop = ServingLoop(root, **engine_options)
    app = build_app(loop, Path(root), loop.engine.plan.model)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        loop.close()
    return 4 if loop.failure is not None else 0
