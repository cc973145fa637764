"""How a local deployment changes the engines behind its router without closing the deployment's URL.

[Note: handing over the router] Clients hold the deployment's router URL, so an apply must not close that port,
even for a moment: restarting vllm-router on its port refused the requests that arrived meanwhile (2 of 626 in
examples/replan/cpu_replay.md). What vllm-router 0.1.17 can change while it runs (checked on this machine
against stand-in and vLLM engines):
- regular mode (``--worker-urls``): ``POST /add_worker?url=U`` waits for U's /health and routes to it (the
  policy, cache_aware included, learns it); ``POST /remove_worker?url=U`` stops routing to U, and the requests
  already sent to U finish.
- P/D mode (``--vllm-pd-disaggregation``): ``/add_worker`` answers "PD router requires specific
  add_prefill_server or add_decode_server methods" (those exist in its Rust code, reached by no HTTP route),
  with or without ``worker_type=``. ``/remove_worker`` removes, but a request picks its decode engine when it
  starts and is sent there when its prefill ends, seconds later: one picked before the removal still reached the
  removed engine after it, so no drain of the engine can tell when the router is done with it.
- nothing changes a running router's mode or policies; and the plan's P/D decode policy depends on the decode
  count (`compiler.emit.serving.router`), so scaling decode changes the command, not only its URLs.
- ``--enable-igw`` takes prefill and decode workers through ``POST /workers``, but it sends a model's requests
  down its P/D path as soon as one prefill or decode worker is registered (a mode switch passes through a
  router with a prefill engine and no decode engine, whose requests fail), and it is not the command the plan's
  manifests run; not used.
So the deployment runs the plan's router, exactly as the plan says, on a port of its own, behind a second
vllm-router: the front, in regular mode on the deployment's URL with one worker, the plan's router
(`front_command`). The front is what the router's Service is on Kubernetes: the name clients use, stable while
what is behind it changes. Its answers are the plan's router's as they are (no retries, no circuit breaker) and
it costs one more hop on loopback. An apply, once the next plan's new engines are healthy:
- when both plans' routers run in regular mode with the same flags, only other worker URLs: tells the running
  router `/add_worker` for each new engine and `/remove_worker` for each leaving one (`router_moves`); the
  router keeps running with its state (cache-aware prefix trees); the leaving engines drain after `SETTLE_S`
  (a request the router chose a leaving engine for just before its removal is on its way) and once their
  running and waiting requests read 0 twice (`compiler.deploy.local.DRAIN_S`);
- otherwise (P/D mode, a mode change, other policies): starts the next plan's router on a new port, waits for
  its /health, adds it to the front and removes the old one from the front, waits `SETTLE_S` for requests the
  front chose the old router for just before, and stops the old router with SIGTERM, on which vllm-router stops
  accepting connections and finishes the requests it holds, both stages of each, before it exits (at most
  `compiler.deploy.local.DRAIN_S`). Only the old router sent requests to the leaving engines, so they are idle
  by then; they stop.
At no moment does the front's port close or the front have no router to send a request to. Tests: the calls
each kind of apply makes and the URL never refusing a connection (tests/deploy/test_apply.py, stand-ins for the
router and engines); no request failing under load through the real router in front of stand-in engines (its
``engine`` test) and through real engines (tests/deploy/test_apply_engines.py).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from compiler.ir.errors import RuntimeFailure

#: How long the front may still be sending the old router requests it chose before it was told to remove it.
SETTLE_S = 1.0
#: A worker-list flag of vllm-router's command line and the role of the URLs after it.
WORKER_FLAGS = {"--worker-urls": "regular", "--prefill": "prefill", "--decode": "decode"}
#: Flags whose values differ between two routers of one deployment by design (each has its own ports).
OWN_PORT_FLAGS = ("--port", "--prometheus-port")


@dataclass(frozen=True, slots=True)
class RouterMoves:
    """What the running router is told: worker URLs to add, then worker URLs to remove."""

    add: tuple[str, ...]
    remove: tuple[str, ...]


def front_command(binary: Path, host: str, port: int, router_url: str, prometheus_port: int) -> list[str]:
    """The front: vllm-router in regular mode on the deployment's port with the plan's router as its one worker;
    round_robin (one worker: nothing to balance), no retries and no circuit breaker (an answer passes through as
    the plan's router gave it, and a run of failed requests does not shut the front's only worker out)."""
    return [str(binary), "--host", host, "--port", str(port), "--policy", "round_robin", "--disable-retries",
            "--disable-circuit-breaker", "--worker-urls", router_url, "--prometheus-host", host,
            "--prometheus-port", str(prometheus_port)]


def split_workers(argv: list[str]) -> tuple[tuple[str, ...], frozenset[tuple[str, str]]]:
    """A vllm-router command's flags without the program, its worker URLs and its own ports; and its workers as
    (role, URL) pairs.

    >>> flags, workers = split_workers(["vllm-router", "--port", "9", "--policy", "cache_aware",
    ...                                 "--worker-urls", "http://a", "http://b"])
    >>> flags, sorted(workers)
    (('--policy', 'cache_aware'), [('regular', 'http://a'), ('regular', 'http://b')])
    """
    flags, workers, i = [], set(), 1
    while i < len(argv):
        if argv[i] in WORKER_FLAGS:
            role, i = WORKER_FLAGS[argv[i]], i + 1
            while i < len(argv) and not argv[i].startswith("--"):
                workers.add((role, argv[i]))
                i += 1
        elif argv[i] in OWN_PORT_FLAGS:
            i += 2
        else:
            flags.append(argv[i])
            i += 1
    return tuple(flags), frozenset(workers)


def router_moves(running: list[str], wanted: list[str]) -> RouterMoves | None:
    """The calls that make the vllm-router started with `running` route as one started with `wanted` would, or
    None where it cannot change in place: other flags (mode, policies), or P/D mode."""
    flags, have = split_workers(running)
    wanted_flags, want = split_workers(wanted)
    if flags != wanted_flags or "--vllm-pd-disaggregation" in flags:
        return None
    return RouterMoves(tuple(sorted(u for _, u in want - have)), tuple(sorted(u for _, u in have - want)))


def tell(router_url: str, moves: RouterMoves, timeout_s: float = 60.0) -> None:
    """Make `moves` on the running router at `router_url` (adds first, so it is never left without a worker);
    `RuntimeFailure` with the router's answer if it refuses one."""
    for path, urls in (("add_worker", moves.add), ("remove_worker", moves.remove)):
        for url in urls:
            call = f"{router_url}/{path}?url={urllib.parse.quote(url, safe='')}"
            try:
                with urllib.request.urlopen(urllib.request.Request(call, data=b"", method="POST"),
                                            timeout=timeout_s) as r:
                    r.read()
            except urllib.error.HTTPError as e:
                raise RuntimeFailure(f"vllm-router at {router_url} refused {path} {url}: HTTP {e.code} "
                                     f"{e.read()[:300].decode(errors='replace')}") from None
            except OSError as e:
                raise RuntimeFailure(f"vllm-router at {router_url} did not answer {path} {url}: {e}") from None
