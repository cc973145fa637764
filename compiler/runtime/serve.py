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

Requests are validated at the door (`compiler.runtime.openai_api`): a value the OpenAI API or this runtime does
not accept gets 400 with OpenAI's error JSON (``{"error": {"message", "type", "param", "code"}}``), an unknown
model 404 (``model_not_found``); every error, malformed JSON included, is that JSON. ``n`` choices per prompt,
batch prompts (a list of prompts), ``stop`` (strings; token ids written as integers without a tokenizer; the stop
sequence is not returned), ``logprobs`` / ``top_logprobs``, and ``seed`` (none: a fresh one per choice; seed s:
choice i samples with s + i). Chat applies the tokenizer's chat template to all messages; without one only a
single message (its token ids) is accepted.

Failures: a request whose sampling or callbacks raise inside the engine fails alone (500; the engine goes on,
`Engine._accept`). If the engine cannot go on (a worker died or hung, or the scheduling loop itself raised), every
in-flight request gets an error (a JSON 503, or an SSE ``error`` event before ``[DONE]``), ``/health`` turns 503,
new requests get 503, and `serve` shuts the server down and returns 4, so that an orchestrator restarts it.
SIGTERM drains: in-flight requests get up to `DRAIN_S` to finish, then the workers are stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import secrets
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from compiler.ir.errors import BadInput, GimletError, RuntimeFailure
from compiler.runtime.engine import Engine, Request
from compiler.runtime.openai_api import (MAX_CHOICES, UNSUPPORTED, ApiError, Body, ChatBody, CompletionBody,
                                         Detokenizer, Tokens, choice_logprobs, validation_error)

log = logging.getLogger(__name__)

_DONE = object()
#: Seconds SIGTERM gives in-flight requests to finish before their connections are closed.
DRAIN_S = 10.0


class RequestFailed(Exception):
    """One request failed inside the engine (`Request.error`); the engine goes on."""


class ServerStopping(Exception):
    """The server shuts down before this request finished."""


class ServingLoop:
    """The engine's thread: admits submitted requests, steps the engine, reports tokens and failures."""

    def __init__(self, root: str | Path, **engine_options) -> None:
        self.engine = Engine(root, **engine_options)
        self.inbox: queue.Queue = queue.Queue()
        self.failure: str | None = None
        self.failed = threading.Event()  # set with `failure`: the engine cannot go on
        self.inflight: dict[str, tuple[Request, Any, asyncio.AbstractEventLoop, int]] = {}
        self.stats: dict[str, int] = {}
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="gimletc-engine", daemon=True)
        self.thread.start()

    def submit(self, req: Request, out: asyncio.Queue, loop: asyncio.AbstractEventLoop, index: int = 0) -> None:
        """Queue `req`; `out` receives ``(index, item)``: each token, then `_DONE` or an exception."""
        self.inbox.put((req, out, loop, index))

    @staticmethod
    def _put(out: asyncio.Queue, loop: asyncio.AbstractEventLoop, index: int, item: Any) -> None:
        try:
            loop.call_soon_threadsafe(out.put_nowait, (index, item))
        except RuntimeError:  # the client's event loop is gone (it left); nothing to tell it
            pass

    def _emit(self, req: Request, item: Any) -> None:
        _, out, loop, index = self.inflight[req.id]
        self._put(out, loop, index, item)

    def healthy(self) -> bool:
        return self.failure is None and (self.stopping or self.thread.is_alive())

    def _loop(self) -> None:
        last_stats = 0.0
        try:
            while not self.stopping:
                self._drain(block=not self.engine.busy())
                if self.engine.busy():
                    self.engine.step()
                    for rid, (req, _, _, _) in list(self.inflight.items()):
                        if req.finish_reason is not None:
                            self._emit(req, _DONE if req.error is None else RequestFailed(req.error))
                            del self.inflight[rid]
                if time.monotonic() - last_stats > 2.0:
                    self._refresh_stats()
                    last_stats = time.monotonic()
        except Exception as e:  # noqa: BLE001 - the engine cannot go on: say so to everyone, then stop
            log.exception("the engine failed")
            self.failure = str(e) if isinstance(e, GimletError) else f"the engine's loop failed: {type(e).__name__}: {e}"
            if not isinstance(e, RuntimeFailure):  # the workers still run: stop them (bounded by the stage timeout)
                with contextlib.suppress(Exception):
                    self.engine.close()
            self._fail_all(RuntimeFailure(self.failure))
            self.failed.set()
            return
        self._fail_all(ServerStopping("the server is shutting down; retry on another replica"))

    def _fail_all(self, error: Exception) -> None:
        for req, _, _, _ in list(self.inflight.values()):
            self._emit(req, error)
        self.inflight.clear()
        while True:
            try:
                _, out, loop, index = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._put(out, loop, index, error)

    def _refresh_stats(self) -> None:
        totals: dict[str, int] = {}
        for s in self.engine.worker_stats().values():
            for kind, n in s["bytes"].items():
                totals[kind] = totals.get(kind, 0) + n
        self.stats = totals

    def _drain(self, block: bool) -> None:
        try:
            item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            req, out, loop, index = item
            req.on_token = lambda r, token: self._emit(r, token)
            try:
                self.engine.submit(req)
                self.inflight[req.id] = (req, out, loop, index)
            except BadInput as e:
                self._put(out, loop, index, e)
            except Exception as e:  # noqa: BLE001 - a request the engine cannot take fails alone
                self._put(out, loop, index, RequestFailed(f"{type(e).__name__}: {e}"))
            try:
                item = self.inbox.get_nowait()
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


def _item_error(item: Exception) -> ApiError:
    """The HTTP error for what the engine's thread reported instead of tokens."""
    if isinstance(item, BadInput):
        return ApiError(400, str(item), param="prompt")
    if isinstance(item, RequestFailed):
        return ApiError(500, f"this request failed inside the engine (others are unaffected): {item}",
                        kind="server_error", code="request_failed")
    if isinstance(item, ServerStopping):
        return ApiError(503, str(item), kind="server_error", code="shutting_down")
    return ApiError(503, f"the plan's workers failed: {item}", kind="server_error", code="engine_failed")


class _Choice:
    """One choice of a response: its engine request and what the client has been sent of it."""

    def __init__(self, index: int, req: Request, prompt_index: int, tokens: Tokens) -> None:
        self.index, self.req, self.prompt_index = index, req, prompt_index
        self.tokens: list[int] = []  # as streamed to the client (`req.tokens` grows on the engine's thread)
        self.text = Detokenizer(tokens) if tokens.tokenizer is not None else None  # of `tokens`, while streaming
        self.sent_tokens = 0
        self.sent_chars = 0


def _prepare(body: Body, chat: bool, tokens: Tokens, model_name: str) -> tuple[list[_Choice], list]:
    """The engine requests of a validated body (n per prompt), or an `ApiError` saying what to change."""
    for name, off in UNSUPPORTED.items():
        value = (body.model_extra or {}).get(name, off)
        if value != off and not (name == "best_of" and value == body.n):
            raise ApiError(400, f"{name}: not supported by this server; leave it out", param=name)
    if body.model is not None and body.model != model_name:
        raise ApiError(404, f"The model `{body.model}` does not exist; this server serves `{model_name}` "
                            f"(GET /v1/models)", param="model", code="model_not_found")
    if chat:
        prompts = [tokens.chat(body.messages)]
        if body.top_logprobs is not None and not body.logprobs:
            raise ApiError(400, "top_logprobs: needs logprobs: true", param="top_logprobs")
        top = (body.top_logprobs or 0) if body.logprobs else None
        max_tokens = body.max_completion_tokens or body.max_tokens
    else:
        prompts = tokens.prompts(body.prompt)
        top = body.logprobs
        max_tokens = body.max_tokens
    if len(prompts) * body.n > MAX_CHOICES:
        raise ApiError(400, f"n: {len(prompts)} prompts x n {body.n} choices exceed {MAX_CHOICES} per request",
                       param="n")
    stops = [s for s in tokens.stops(body.stop) if s]
    stop_check = tokens.stop_check(stops) if stops else None
    choices = []
    for p, ids in enumerate(prompts):
        for j in range(body.n):
            seed = secrets.randbits(63) if body.seed is None else (body.seed + j) % (1 << 63)
            req = Request(ids, max_new_tokens=max_tokens or 16,
                          temperature=1.0 if body.temperature is None else body.temperature,
                          top_p=1.0 if body.top_p is None else body.top_p, seed=seed, ignore_eos=body.ignore_eos,
                          logprobs=top, stop_check=stop_check)
            choices.append(_Choice(len(choices), req, p, tokens))
    return choices, stops


def build_app(loop: ServingLoop, root: Path, model_name: str):
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import PlainTextResponse, StreamingResponse
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from starlette.exceptions import HTTPException

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn re-raises SIGTERM / SIGINT once it has shut down, which would end the process before `serve`'s
        # own cleanup: stop the workers here, while shutting down.
        await asyncio.get_running_loop().run_in_executor(None, loop.close)

    app = FastAPI(title="gimletc", version="1", lifespan=lifespan)
    registry, m = _metrics(loop)
    tokens = Tokens(root)

    @app.exception_handler(ApiError)
    async def api_error(_, exc: ApiError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_, exc: RequestValidationError):
        return validation_error(exc).response()

    @app.exception_handler(HTTPException)
    async def http_error(_, exc: HTTPException):
        return ApiError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None
                        ).response()

    @app.exception_handler(Exception)
    async def internal(_, exc: Exception):
        log.exception("request failed")
        return ApiError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error").response()

    @app.get("/health")
    def health():
        if not loop.healthy():
            return ApiError(503, loop.failure or "the engine's thread stopped", kind="server_error",
                            code="engine_failed").response()
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics():
        return PlainTextResponse(generate_latest(registry).decode(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "gimletc"}]}

    async def generate(body: Body, chat: bool):
        if not loop.healthy():
            raise ApiError(503, f"the plan's workers failed: {loop.failure}", kind="server_error",
                           code="engine_failed")
        choices, stops = _prepare(body, chat, tokens, model_name)
        out: asyncio.Queue = asyncio.Queue()
        for c in choices:
            loop.submit(c.req, out, asyncio.get_running_loop(), c.index)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        usage_wanted = body.stream_options is not None and body.stream_options.include_usage
        if body.stream:
            return StreamingResponse(_stream(out, choices, stops, rid, chat, usage_wanted, tokens, m, model_name),
                                     media_type="text/event-stream")
        return await _answer(out, choices, stops, rid, chat, tokens, m, model_name)

    async def completions(body: CompletionBody):
        return await generate(body, chat=False)

    async def chat_completions(body: ChatBody):
        return await generate(body, chat=True)

    for path, handler, model in (("/v1/completions", completions, CompletionBody),
                                 ("/v1/chat/completions", chat_completions, ChatBody)):
        handler.__annotations__["body"] = model  # a real class: annotations are strings in this module
        app.post(path)(handler)

    return app


async def _answer(out: asyncio.Queue, choices: list[_Choice], stops: list, rid: str, chat: bool, tokens: Tokens, m,
                  model_name: str) -> dict:
    """The whole answer once every choice is done (`out` as `_stream` reads it); the first error, raised."""
    failed = None
    for _ in choices:
        while True:
            index, item = await out.get()
            if isinstance(item, Exception):
                failed = failed or item
                break
            if item is _DONE:
                break
    if failed is not None:
        raise _item_error(failed)
    listed = []
    for c in choices:
        _observe(m, c.req)
        n_visible, text = tokens.visible(c.req.tokens, stops, final=True)
        shown = c.req.tokens[:n_visible]
        lp = choice_logprobs(tokens, c.req, n_visible, chat)
        choice = ({"index": c.index, "message": {"role": "assistant", "content": text}, "logprobs": lp} if chat
                  else {"index": c.index, "text": text, "logprobs": lp})
        listed.append({**choice, "finish_reason": c.req.finish_reason, "token_ids": shown})
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model_name, "choices": listed, "usage": _usage(choices)}


async def _stream(out: asyncio.Queue, choices: list[_Choice], stops: list, rid: str, chat: bool, usage_wanted: bool,
                  tokens: Tokens, m, model_name: str):
    """The choices' tokens as Server-Sent Events as they come (`out` gives (choice index, token | _DONE | error)):
    the visible text's new part per chunk, a last chunk per choice with its finish reason, usage where asked."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": rid, "object": kind, "created": int(time.time()), "model": model_name}
    if chat:
        for c in choices:
            yield _sse({**base, "choices": [{"index": c.index, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
    left = len(choices)
    while left:
        index, item = await out.get()
        c = choices[index]
        if isinstance(item, Exception):
            e = _item_error(item)
            yield _sse({"error": {"message": str(e), "type": e.kind, "param": None, "code": e.code}})
            break
        final = item is _DONE
        if not final:
            c.tokens.append(item)
        so_far = c.text.update(c.tokens) if c.text is not None and not final else None
        n_visible, text = tokens.visible(c.tokens, stops, final=final, start=c.sent_tokens, text=so_far)
        if n_visible > c.sent_tokens or len(text) > c.sent_chars:
            delta, ids = text[c.sent_chars:], c.tokens[c.sent_tokens:n_visible]
            piece = {"delta": {"content": delta}} if chat else {"text": delta}
            lp = choice_logprobs(tokens, c.req, n_visible, chat, start=c.sent_tokens)
            yield _sse({**base, "choices": [{"index": c.index, **piece, "logprobs": lp, "finish_reason": None,
                                             "token_ids": ids}]})
            c.sent_tokens, c.sent_chars = max(c.sent_tokens, n_visible), max(c.sent_chars, len(text))
        if final:
            left -= 1
            yield _sse({**base, "choices": [{"index": c.index, **({"delta": {}} if chat else {"text": ""}),
                                             "finish_reason": c.req.finish_reason}]})
            _observe(m, c.req)
    else:
        if usage_wanted:
            yield _sse({**base, "choices": [], "usage": _usage(choices)})
    yield "data: [DONE]\n\n"


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _usage(choices: list[_Choice]) -> dict:
    prompt = sum({c.prompt_index: len(c.req.prompt) for c in choices}.values())  # each prompt once, for n choices
    completion = sum(len(c.req.tokens) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def serve(root: str | Path, *, host: str = "127.0.0.1", port: int = 8000,
          on_ready: Callable[[str], None] | None = None, **engine_options) -> int:
    """Start the workers (or wait for them: ``external=True``), then serve until interrupted or until the engine
    cannot go on; returns the exit code (4 if the engine failed). `on_ready` receives the server's URL once it
    answers (the CLI prints it). `engine_options` are `Engine`'s (stage and start timeouts, external)."""
    import uvicorn

    sock = listening_socket(host, port)  # before any worker starts: a port in use is bad input, said at once
    try:
        loop = ServingLoop(root, **engine_options)
    except BaseException:
        sock.close()
        raise
    app = build_app(loop, Path(root), loop.engine.plan.model)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=DRAIN_S))

    def watch() -> None:  # the engine cannot go on: stop serving, so that the process exits and is restarted
        loop.failed.wait()
        log.error("stopping the server: %s", loop.failure)
        server.should_exit = True

    threading.Thread(target=watch, name="gimletc-engine-watch", daemon=True).start()
    if on_ready is not None:
        url = server_url(host, sock.getsockname()[1])

        def announce() -> None:  # uvicorn's `started`: its startup is done and it accepts on the socket
            while not server.started:
                if server.should_exit or loop.failed.is_set():
                    return
                time.sleep(0.05)
            on_ready(url)

        threading.Thread(target=announce, name="gimletc-serve-ready", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        loop.close()
        sock.close()
    return 4 if loop.failure is not None else 0


def server_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches the server at (an IPv6 address in brackets).

    >>> server_url("127.0.0.1", 8000), server_url("::1", 8000)
    ('http://127.0.0.1:8000', 'http://[::1]:8000')
    """
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def listening_socket(host: str, port: int):
    """A TCP socket bound to `host`:`port` for the server (uvicorn listens on it); `BadInput` naming the flag when
    the address does not resolve, the port is taken or binding is refused."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise BadInput(f"--host {host}: cannot resolve it ({getattr(e, 'strerror', None) or e}); give an address "
                       "such as 127.0.0.1 or 0.0.0.0") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a just-closed port is free
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise BadInput(f"--port {port}: {host}:{port} is already in use (another server is listening there); "
                           "stop it or pick another --port") from None
        raise BadInput(f"--host {host} --port {port}: cannot listen there ({e.strerror or e}); pick another "
                       "--host or --port") from None
    return sock
