"""Apply a replan to a running local deployment (``gimletc replan DIR --apply --out DIR2``): start and stop engine
replicas so that the deployment of DIR runs DIR2's plan, keeping every replica whose shape stays.

[Note: applying a replan locally] ``gimletc deploy DIR --local`` owns the engine processes, so the replan asks it
to change them: it writes ``DIR/deploy/apply.json`` (the next plan directory and a request id) and waits for
``DIR/deploy/applied.json`` with that id. The deployment checks for a request between its health checks
(`Deployment.watch`), plans the change (`reconcile`): per replica shape (an option's key without class or
KV-target suffix: device, parallelism, batch, role), the replicas it runs now and those the next plan wants;
the first of each shape are kept (renamed to the next plan's pool), the missing ones started with the next
plan's launch flags, the rest stopped. Make before break: the new engines start while the running ones and the
router serve; once they are healthy the router routes the next plan's way without closing the deployment's
URL ([Note: handing over the router] in `compiler.deploy.router_handover`: the running router is told to add and
remove engines where it can, else the next plan's router takes its place behind the front); then the replicas
that leave drain (their running and waiting requests reach 0, at most `compiler.deploy.local.DRAIN_S`) and
stop. (Breaking first cost the replay on this machine's engines a 50 s outage per apply, and restarting the
router on its port 2 refused requests: examples/replan/cpu_replay.md.) New engines read DIR2's ``model/`` and
share DIR's KV store. Then it writes ``applied.json`` (started, stopped, kept) and serves on under DIR2's plan;
``endpoints.json`` says so, in ``DIR/deploy/`` and ``DIR2/deploy/``, and the deployment takes requests in both:
the next cycle, ``gimletc replan DIR2 --apply --out DIR3``, finds it in DIR2 (DIR2's file goes when DIR3 runs).
A request the deployment cannot apply (DIR2 not deployable here) is answered with its error and changes nothing.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.ir.files import atomic_write_text

REQUEST = "apply.json"
ANSWER = "applied.json"
#: How long `apply_local` waits for the deployment's answer: engines take minutes to start here.
APPLY_TIMEOUT_S = 1800.0


def shape(option_key: str) -> str:
    """A pool's replica shape: its option key without class (``|c``) or KV-target (``>t``) suffix (the rule of
    `compiler.place.moves.base_key`, which this layer does not import)."""
    return option_key.split("|", 1)[0].split(">", 1)[0]


@dataclass(frozen=True, slots=True)
class Change:
    """What `reconcile` decides: replicas kept ((old pool, replica) -> (new pool, replica)), stopped (old pool,
    replica) and started (new pool, replica)."""

    kept: tuple[tuple[tuple[str, int], tuple[str, int]], ...]
    stopped: tuple[tuple[str, int], ...]
    started: tuple[tuple[str, int], ...]


def reconcile(running: list[tuple[str, int, str]], wanted: list[tuple[str, str, int]]) -> Change:
    """`running`: (pool, replica, shape) of each engine replica now; `wanted`: (pool, shape, replicas) of the next
    plan's engine pools. Keeps the lowest-numbered replicas of each shape, in the next plan's pool order.

    >>> c = reconcile([("pool0", 0, "d:x"), ("pool0", 1, "d:x"), ("pool1", 0, "p:x")], [("pool0", "p:x", 2),
    ...                                                                                 ("pool1", "d:x", 1)])
    >>> c.kept   # old pool0's first decode replica becomes pool1's; old pool1's prefill replica pool0's first
    ((('pool0', 0), ('pool1', 0)), (('pool1', 0), ('pool0', 0)))
    >>> c.stopped, c.started   # the second decode replica stops; a second prefill replica starts
    ((('pool0', 1),), (('pool0', 1),))
    """
    free: dict[str, list[tuple[str, int]]] = {}
    for pool, replica, s in sorted(running, key=lambda x: (x[1], x[0])):
        free.setdefault(s, []).append((pool, replica))
    kept, started = [], []
    for pool, s, replicas in wanted:
        for r in range(replicas):
            if free.get(s):
                kept.append((free[s].pop(0), (pool, r)))
            else:
                started.append((pool, r))
    stopped = sorted(x for left in free.values() for x in left)
    return Change(tuple(sorted(kept)), tuple(stopped), tuple(started))


def apply_local(running_dir: str | Path, next_dir: str | Path, *, act: bool, timeout_s: float = APPLY_TIMEOUT_S,
                progress=None) -> str:
    """Ask the local deployment of `running_dir` to run `next_dir`'s plan ([Note: applying a replan locally]);
    returns one line saying what changed. A replan that holds applies nothing."""
    running, nxt = Path(running_dir), Path(next_dir)
    endpoints = check_running(running, nxt)
    if not act:
        return "--apply: the replan held (no move clears the hysteresis): nothing to apply"
    work = endpoints.parent
    ident = uuid.uuid4().hex
    (work / ANSWER).unlink(missing_ok=True)
    atomic_write_text(work / REQUEST, json.dumps({"id": ident, "plan": str(nxt.resolve())}) + "\n")
    if progress:
        progress(f"asked the deployment of {running} to run {nxt} (waiting up to {timeout_s:.0f} s for new engines)")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = _read(work / ANSWER)
        if answer is not None and answer.get("id") == ident:
            if answer.get("error"):
                raise RuntimeFailure(f"--apply: the deployment of {running} refused {nxt}: {answer['error']}")
            return (f"applied {nxt} to the local deployment of {running}: started {_names(answer['started'])}, "
                    f"stopped {_names(answer['stopped'])}, kept {len(answer['kept'])} replica(s) running")
        if not _alive(endpoints):
            raise RuntimeFailure(f"--apply: the deployment of {running} stopped before answering; see {work}/logs")
        time.sleep(1.0)
    raise RuntimeFailure(f"--apply: no answer from the deployment of {running} within {timeout_s:.0f} s; see "
                         f"{work}/logs (the request stays in {work / REQUEST})")


def check_running(running_dir: str | Path, next_dir: str | Path) -> Path:
    """The endpoints file of the local deployment running `running_dir`'s plan, or `BadInput` saying how to
    start one (``gimletc replan --apply`` asks before it solves)."""
    running = Path(running_dir)
    endpoints = running / "deploy" / "endpoints.json"
    if not endpoints.exists() or not _alive(endpoints):
        raise BadInput(f"--apply: no local deployment of {running} is running ({endpoints} is absent or stale); "
                       f"start it with `gimletc deploy {running} --local`, or deploy {next_dir}/k8s on a cluster "
                       "(kubectl apply -k)")
    return endpoints


def _names(pairs) -> str:
    return ", ".join(f"{p}/{r}" for p, r in pairs) or "none"


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(endpoints: Path) -> bool:
    """Whether the deployment still runs: its endpoints file is there and the process that deploys it (or, in
    a file without it, any of its processes) answers to a signal."""
    data = _read(endpoints)
    if data is None:
        return endpoints.exists()
    pids = [data["deployer_pid"]] if "deployer_pid" in data else [p["pid"] for p in data.get("processes", [])]
    for pid in pids:
        try:
            os.kill(pid, 0)
            return True
        except PermissionError:
            return True
        except ProcessLookupError:
            continue
    return not pids


def pending(work: Path) -> dict | None:
    """An apply request waiting in a deployment's work folder (`Deployment.watch` takes it), or None."""
    return _read(work / REQUEST)


def answer(work: Path, ident: str, change: Change | None, error: str | None = None) -> None:
    data = {"id": ident, "error": error}
    if change is not None:
        data.update(kept=[list(map(list, k)) for k in change.kept], stopped=[list(x) for x in change.stopped],
                    started=[list(x) for x in change.started])
    atomic_write_text(work / ANSWER, json.dumps(data, indent=1, sort_keys=True) + "\n")
    (work / REQUEST).unlink(missing_ok=True)
