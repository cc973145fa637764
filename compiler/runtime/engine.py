"""The driver (rank 0): owns requests, schedules prefill, KV hand-off and decode steps, samples tokens.

Scheduling is continuous batching: each iteration admits waiting requests into
serving units with room (prefilling them together on a prefill replica,
sampling their first token, handing their KV to the unit's decode workers),
then runs one decode step over every request the unit holds; finished requests
leave and free their pages at once, new ones join on the next iteration. A
unit with a drafter runs its decode step as one speculative verification
([Note: speculative decoding] in compiler/runtime/speculative.py).

Workers are spawned here (`LocalWorkers`) or started elsewhere and awaited
(`ExternalWorkers`, ``external=True``); see [Note: rendezvous] in
compiler/runtime/launch.py.

Failures: every receive runs under the process group's timeout
(``stage_timeout_s``) and the workers' watchdog (`compiler.runtime.launch`);
either way `RuntimeFailure` names the stage instance (``pool/r0/s0/tp0``),
whether it died (with its exit code and last log lines) or did not answer, and
every worker process is gone when it is raised.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from compiler.plan.topology import worker_table, world_size
from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.runtime.launch import ExternalWorkers, LocalWorkers, driver_store, external_port, pin_gloo_to_loopback
from compiler.runtime.plan_dir import open_plan_dir
from compiler.runtime.routes import Hop, Unit, handoff_pairs, units
from compiler.runtime.sampling import logprobs, sample, sampling_problems
from compiler.runtime.speculative import SpecStats, draft_len_after, verify
from compiler.runtime.wire import ACK, CONTROL, DATA, DRAFT, recv_json, send_json

log = logging.getLogger(__name__)


@dataclass
class Request:
    """One generation request and, as it runs, its tokens and timings."""

    prompt: list[int]
    max_new_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    keep_logits: bool = False  # keep each step's logits row (tests compare them with Hugging Face)
    id: str = ""
    tokens: list[int] = field(default_factory=list)
    arrived_s: float = 0.0
    first_token_s: float | None = None
    done_s: float | None = None
    finish_reason: str | None = None
    on_token: Callable[[Request, int], None] | None = None
    generator: object = None
    unit: str | None = None
    logits: list = field(default_factory=list)
    draft_len: int = 0  # tokens of prompt + tokens the drafter's cache holds (speculative decoding)
    logprobs: int | None = None  # report each token's log-probability and this many most likely alternatives
    token_logprobs: list = field(default_factory=list)  # per token: (logprob, [(token, logprob), ...])
    stop_check: Callable[[Request], bool] | None = None  # True once the tokens so far end in a stop sequence
    error: str | None = None  # why this request failed alone (finish_reason "error"); the engine goes on

    @property
    def position(self) -> int:
        """Position of the next token fed to decode (the last sampled one)."""
        return len(self.prompt) + len(self.tokens) - 1

    def problems(self, vocab: int | None = None, context: int | None = None) -> list[str]:
        """What is wrong with it, one line each; empty when it can run (`Engine.submit` refuses it, ``gimletc run``
        checks before any worker starts). Given the model's `vocab` size and `context` length
        (``max_position_embeddings``), its token ids and its length are checked against them too."""
        problems = sampling_problems(temperature=self.temperature, top_p=self.top_p)
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            problems.append(f"max_new_tokens {n}: give at least 1")
            n = 1
        if not self.prompt:
            problems.append("empty prompt; give at least one token id")
        if vocab is not None:
            outside = [t for t in self.prompt if not 0 <= t < vocab]
            if outside:
                problems.append(f"token id {outside[0]} is outside the model's vocabulary; token ids must lie in "
                                f"[0, {vocab}) (its vocab_size)")
        if context is not None and len(self.prompt) + n > context:
            room = context - len(self.prompt)
            problems.append(f"{len(self.prompt)} prompt + {n} new tokens exceed the model's context of {context} "
                            f"tokens (max_position_embeddings); " + (f"ask for at most {room} new tokens" if room > 0
                                                                     else "shorten the prompt"))
        return problems


def model_limits(config: dict) -> tuple[int, int]:
    """(vocabulary size, context length) of a plan's model from its ``config.json``."""
    return int(config["vocab_size"]), int(config.get("max_position_embeddings", 1 << 30))


#: How long local workers may take to import torch and load their plan before the rendezvous (a loaded 2-core
#: machine takes seconds; the stage timeout starts counting only once every worker is ready).
START_TIMEOUT_S = 120.0
#: The same for workers started elsewhere (pods: scheduling, image pulls).
EXTERNAL_START_TIMEOUT_S = 600.0


class Engine:
    def __init__(self, root: str | Path, *, stage_timeout_s: float = 15.0, log_dir: str | Path | None = None,
                 external: bool = False, start_timeout_s: float | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.pd = open_plan_dir(root)
        self.plan = self.pd.plan
        self.units = units(self.plan)
        self.table = {w.rank: w for w in worker_table(self.plan)}
        self.vocab, self.max_len = model_limits(self.pd.config)
        self.timeout_s = stage_timeout_s
        self.waiting: deque[Request] = deque()
        self.running: dict[str, list[Request]] = {u.name: [] for u in self.units}
        self.ids = itertools.count()
        self.rr = itertools.count()
        self.kv_bytes_predicted = 0
        self.draft_bytes_predicted = 0
        self.hidden_tokens = 0
        self.spec = {u.name: SpecStats(u.draft.k) for u in self.units if u.draft is not None}
        self.closed = False
        world = world_size(self.plan)
        start_s = start_timeout_s or (EXTERNAL_START_TIMEOUT_S if external else START_TIMEOUT_S)
        if external:
            pin_gloo_to_loopback(os.environ.get("MASTER_ADDR", ""))
        store = driver_store(external_port(world) if external else 0, world, start_s)
        workers = tuple(self.table.values())
        self.workers = (ExternalWorkers(workers) if external else
                        LocalWorkers(self.pd.root, workers, port=store.port, log_dir=log_dir))
        started = time.monotonic()
        log.info("starting %d stage workers (%s; logs: %s)", len(workers), "external" if external else "local",
                 self.workers.log_dir)
        self.workers.start()
        torch.set_num_threads(1)
        try:
            with self._guard("starting", None):
                self.workers.wait_ready(store, start_s)
                log.info("workers ready after %.2f s", time.monotonic() - started)
                if self.workers.dead is not None:  # died while starting: say so now, not after a rendezvous timeout
                    raise self._failure("starting", None, None)
                dist.init_process_group("gloo", store=store, rank=0, world_size=world,
                                        timeout=datetime.timedelta(seconds=stage_timeout_s))
                from compiler.runtime.worker import tp_groups

                tp_groups(self.plan)
                self._command(list(self.table), {"op": "ping"})
        except RuntimeFailure:
            self._teardown()  # a worker not ready in time: take the others down too
            raise

    # -- failure handling -------------------------------------------------------------------------------------
    @contextmanager
    def _guard(self, what: str, rank: int | None) -> Iterator[None]:
        try:
            yield
        except RuntimeFailure:
            raise
        except Exception as e:
            raise self._failure(what, rank, e) from None

    def _failure(self, what: str, rank: int | None, error: Exception | None, reported: str | None = None
                 ) -> RuntimeFailure:
        """The error to raise: a worker that died before this error surfaced (its cause), else the stage that failed
        or hung. A worker dying after it (a peer of a hung stage whose connection the timeout closed) is not it."""
        caught = time.monotonic()
        time.sleep(0.5)  # let the watchdog see a death that caused this error
        dead = self.workers.dead
        timed_out = error is not None and "timed out" in str(error).lower()
        if timed_out and dead is not None and self.workers.died_at > caught:
            dead = None  # the stage hung; a peer died only when the timeout closed its connection
        self._teardown()
        if dead is not None:
            w, code = dead
            tail = self.workers.log_tail(w)
            return RuntimeFailure(f"stage {w.name} (rank {w.rank}, {w.role} on {w.device}) died with exit code "
                                  f"{code} while {what}" + (f"; its log ends:\n{tail}" if tail else "")
                                  + f"\nlogs: {self.workers.log_dir}")
        name = self.table[rank].name if rank in self.table else "the workers"
        if reported is not None:
            return RuntimeFailure(f"stage {name} (rank {rank}) failed while {what}: {reported[:300]}; all workers "
                                  f"were stopped; logs: {self.workers.log_dir}")
        return RuntimeFailure(f"stage {name} (rank {rank}) did not answer within {self.timeout_s:.0f} s while "
                              f"{what} ({type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}); all "
                              f"workers were stopped; logs: {self.workers.log_dir}")

    def _teardown(self) -> None:
        self.closed = True
        self.workers.stopping = True
        self.workers.kill_all()
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # the group is broken; the processes are gone either way
            pass

    # -- messages ---------------------------------------------------------------------------------------------
    def _command(self, ranks: list[int], cmd: dict, *, wait: bool = True) -> list[dict]:
        for r in ranks:
            with self._guard(f"sending {cmd['op']}", r):
                send_json(cmd, r, CONTROL)
        return self._acks(ranks, cmd["op"]) if wait else []

    def _acks(self, ranks: list[int], what: str) -> list[dict]:
        replies = []
        for r in ranks:
            with self._guard(f"running {what}", r):
                reply = recv_json(r, ACK)
            if not reply.get("ok"):
                raise self._failure(f"running {what}", r, None, reported=reply.get("error"))
            replies.append(reply)
        return replies

    # -- requests ---------------------------------------------------------------------------------------------
    def submit(self, req: Request) -> Request:
        import torch

        problems = req.problems(self.vocab, self.max_len)
        if problems:
            raise BadInput("request: " + "; ".join(problems))
        req.id = req.id or f"req-{next(self.ids)}"
        req.arrived_s = time.perf_counter()
        req.generator = torch.Generator().manual_seed(req.seed)
        self.waiting.append(req)
        return req

    def busy(self) -> bool:
        return bool(self.waiting) or any(self.running.values())

    def step(self) -> None:
        """One scheduling iteration: admit and prefill, then one decode step per unit."""
        self._admit()
        for unit in self.units:
            if self.running[unit.name]:
                self._decode(unit)

    def run(self, requests: list[Request]) -> list[Request]:
        started = time.monotonic()
        for r in requests:
            self.submit(r)
        while self.busy():
            self.step()
        log.info("ran %d requests in %.2f s", len(requests), time.monotonic() - started)
        return requests

    def _admit(self) -> None:
        groups: dict[tuple[str, int], list[Request]] = {}
        for unit in self.units:
            room = unit.batch - len(self.running[unit.name])
            while room > 0 and self.waiting:
                req = self.waiting.popleft()
                source = next(self.rr) % len(unit.prefill)
                groups.setdefault((unit.name, source), []).append(req)
                room -= 1
        by_name = {u.name: u for u in self.units}
        for (name, source), reqs in groups.items():
            self._prefill(by_name[name], source, reqs)

    def _run_route(self, route: tuple[Hop, ...], phase: str, seqs: list[dict], ids: list[int]):
        """Send a step down `route`; return the last tokens' logits (one row per seq)."""
        ranks = list(dict.fromkeys(r for hop in route for r in hop.ranks))
        cmd = {"op": "step", "phase": phase, "route": [h.as_json() for h in route], "seqs": seqs, "ids": ids}
        self._command(ranks, cmd, wait=False)
        return self._logits(route, phase, len(seqs))

    def _logits(self, route: tuple[Hop, ...], phase: str, rows: int):
        """After a step was sent down `route`: the acks of the ranks done early, the `rows` logits rows the last
        hop sends, then the last hop's acks (in the order the workers send them)."""
        import torch
        import torch.distributed as dist

        ranks = list(dict.fromkeys(r for hop in route for r in hop.ranks))
        last = {r: max(i for i, hop in enumerate(route) if r in hop.ranks) for r in ranks}
        early = sorted((r for r in ranks if last[r] < len(route) - 1), key=lambda r: last[r])
        self._acks(early, f"{phase} step")
        logits = torch.empty(rows, self.vocab, dtype=torch.float32)
        sender = route[-1].ranks[0]
        with self._guard(f"{phase} step", sender):
            dist.recv(logits, src=sender, tag=DATA)
        self._acks([r for r in ranks if last[r] == len(route) - 1], f"{phase} step")
        return logits

    def _prefill(self, unit: Unit, source: int, reqs: list[Request]) -> None:
        (pool, replica), route = unit.prefill[source]
        seqs = [{"id": r.id, "start": 0, "n": len(r.prompt)} for r in reqs]
        logits = self._run_route(route, "prefill", seqs, [t for r in reqs for t in r.prompt])
        if unit.kv is not None:
            pairs = handoff_pairs(self.plan, unit, (pool, replica))
            ranks = list(dict.fromkeys([p["src"] for p in pairs] + [p["dst"] for p in pairs]))
            self._command(ranks, {"op": "handoff", "pairs": pairs,
                                  "seqs": [{"id": r.id, "len": len(r.prompt)} for r in reqs]})
            self.kv_bytes_predicted += sum(len(r.prompt) for r in reqs) * unit.kv.bytes_per_token
        now = time.perf_counter()
        for r, row in zip(reqs, logits):
            r.first_token_s = now
            r.unit = unit.name
            self.running[unit.name].append(r)
            self._accept(r, row)
        self._retire(unit)

    def _decode(self, unit: Unit) -> None:
        reqs = self.running[unit.name]
        ks = [min(unit.draft.k, r.max_new_tokens - len(r.tokens) - 1) for r in reqs] if unit.draft else []
        if any(ks):
            return self._speculate(unit, reqs, ks)
        seqs = [{"id": r.id, "start": r.position, "n": 1} for r in reqs]
        logits = self._run_route(unit.decode_route, "decode", seqs, [r.tokens[-1] for r in reqs])
        self.hidden_tokens += len(reqs)
        for r, row in zip(reqs, logits):
            self._accept(r, row)
        self._retire(unit)

    def _speculate(self, unit: Unit, reqs: list[Request], ks: list[int]) -> None:
        """One verification: the drafter drafts k tokens per request, the target checks k + 1 positions at once."""
        import torch
        import torch.distributed as dist

        draft = unit.draft
        seqs = [{"id": r.id, "position": r.position, "k": k, "draft_len": r.draft_len} for r, k in zip(reqs, ks)]
        draft_ids = [t for r, k in zip(reqs, ks) if k > 0 for t in (r.prompt + r.tokens)[r.draft_len:]]
        cmd = {"op": "speculate", "draft_route": [h.as_json() for h in draft.route],
               "route": [h.as_json() for h in unit.decode_route], "seqs": seqs, "draft_ids": draft_ids,
               "ids": [r.tokens[-1] for r in reqs]}
        target = list(dict.fromkeys(r for hop in unit.decode_route for r in hop.ranks))
        self._command(draft.ranks + target, cmd, wait=False)
        drafts = torch.empty(sum(ks), dtype=torch.long)
        head = draft.route[-1].ranks[0]
        with self._guard("drafting", head):
            dist.recv(drafts, src=head, tag=DRAFT)
        self._acks(draft.ranks, "drafting")
        logits = self._logits(unit.decode_route, "verify", sum(ks) + len(reqs))
        self.hidden_tokens += sum(ks) + len(reqs)
        self.draft_bytes_predicted += sum(ks) * draft.detail.bytes_per_token * len(unit.decode_route[0].ranks)
        row = offset = 0
        for r, k in zip(reqs, ks):
            before, position = len(r.tokens), r.position
            accepted = verify(drafts[offset:offset + k].tolist(), logits[row:row + k + 1],
                              lambda logit_row, r=r: self._accept(r, logit_row))
            if k:  # a request with k = 0 (one token left) rides along as a plain decode step
                r.draft_len = draft_len_after(position, k, accepted)
                self.spec[unit.name].add(k, accepted, len(r.tokens) - before)
            row, offset = row + k + 1, offset + k
        self._retire(unit)

    def _accept(self, r: Request, row) -> tuple[int, bool]:
        """Sample (greedy: argmax) and emit one token; returns it and whether the request is finished.

        An error here (sampling, the request's callbacks) is the request's own: it finishes with reason
        ``error`` and `Request.error`, its pages are freed as for any finished request, and the others go on."""
        try:
            return self._take(r, row)
        except Exception as e:  # noqa: BLE001 - whatever one request's sampling or callbacks raise stays its own
            log.exception("request %s failed", r.id)
            r.error = f"{type(e).__name__}: {e}"
            r.finish_reason = "error"
            return -1, True

    def _take(self, r: Request, row) -> tuple[int, bool]:
        if r.keep_logits:
            r.logits.append(row.clone())
        token = sample(row, temperature=r.temperature, top_p=r.top_p, generator=r.generator)
        if r.logprobs is not None:
            r.token_logprobs.append(logprobs(row, token, r.logprobs))
        r.tokens.append(token)
        if r.on_token is not None:
            r.on_token(r, token)
        eos = self.pd.eos_token_id
        if r.stop_check is not None and r.stop_check(r):
            r.finish_reason = "stop"
        elif len(r.tokens) >= r.max_new_tokens:
            r.finish_reason = "length"
        elif not r.ignore_eos and eos is not None and token == eos:
            r.finish_reason = "stop"
        return token, r.finish_reason is not None

    def _retire(self, unit: Unit) -> None:
        done = [r for r in self.running[unit.name] if r.finish_reason is not None]
        if not done:
            return
        now = time.perf_counter()
        for r in done:
            r.done_s = now
        self.running[unit.name] = [r for r in self.running[unit.name] if r.finish_reason is None]
        ranks = list(dict.fromkeys(r for hop in unit.decode_route for r in hop.ranks))
        self._command(ranks + (unit.draft.ranks if unit.draft else []), {"op": "free", "ids": [r.id for r in done]})

    # -- measurements and shutdown ----------------------------------------------------------------------------
    def worker_stats(self) -> dict[int, dict]:
        ranks = list(self.table)
        return dict(zip(ranks, self._command(ranks, {"op": "stats"})))

    def close(self) -> None:
        if self.closed:
            return
        self.workers.stopping = True  # workers leaving after ``stop`` are not deaths for the watchdog
        stopped = False
        try:
            self._command(list(self.table), {"op": "stop"})
            stopped = True
        finally:
            self.closed = True
            self.workers.stop(keep_logs=not stopped)  # a failed stop's error names the logs
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
