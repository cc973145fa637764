"""`gimletc deploy DIR --local`: start every pool of a plan as real vLLM engines on this machine, behind vllm-router.

Before: a plan directory compiled for this host (its engine pools on the
``cpu`` platform: `cpu-host` devices) with its ``model/`` folder. After: one
vLLM OpenAI-compatible server per pool replica and one vllm-router, all on
loopback, until the caller stops them (Ctrl-C, SIGTERM, ``--for S``) or one of
them dies. The plan's router listens on a port of its own behind a second vllm-router, the front, whose URL is
the deployment's and stays open while an apply changes what is behind it ([Note: handing over the router] in
`compiler.deploy.router_handover`). ``DIR/deploy/endpoints.json`` names that URL, each replica's and each
router's URL and process id while they run (`gimletc bench` reads it); ``DIR/deploy/logs/`` holds each
process's output. While it runs, ``gimletc replan DIR --apply`` may ask it to run another plan: it starts and
stops replicas to match ([Note: applying a replan locally] in `compiler.deploy.apply`).

How a plan's launch becomes a local process is `compiler.deploy.launch`.

Every process starts in its own session, so stopping kills its whole process
group (vLLM's engine-core child included): SIGTERM, then SIGKILL after
`STOP_GRACE_S`. A process that exits while the deployment runs stops all the
others, and `deploy` raises `RuntimeFailure` naming the pool and the replica.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from backends.engines import serving_engine
from compiler.deploy.engine_env import engine_python, outside_env, router_binary
from compiler.deploy.launch import (FRONT, ROUTER, ROUTERS, Proc, core_shares, engine_proc, free_port,
                                    front_proc, router_command, set_flag)
from compiler.deploy.router_handover import SETTLE_S, RouterMoves, router_moves, tell
from compiler.plan.manifest import verify_manifest
from compiler.plan.schema import Plan, Pool
from compiler.plan.checks import load_plan
from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.ir.files import atomic_write_text

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
#: How long a replica or a router that a replan stops may take to finish the requests it holds (after nothing
#: sends it any more) before it is stopped anyway.
DRAIN_S = 60.0
def load_local(root: Path) -> tuple[Plan, list[Pool]]:
    """The plan in `root` and its engine pools, once its files match its manifest (as `run` and `serve` check
    them: an edited plan.json or weight file is refused before any engine starts), or a `BadInput` saying why it
    cannot run on this machine's engines."""
    verify_manifest(root)
    plan = load_plan(root)
    return plan, check_local(plan, root)


def check_local(plan: Plan, root: Path) -> list[Pool]:
    """The engine pools of `plan`, or a `BadInput` saying why it cannot run on this machine's engines. Pools on
    other devices than this host's CPUs come first: no recompile with --deployable would run them here."""
    pools = [p for p in plan.pools if p.launch is not None]
    elsewhere = [f"{p.name} ({p.device}, {p.launch.platform if p.launch.platform != 'cpu' else p.launch.engine})"
                 for p in pools if p.launch.platform not in serving_engine(p.launch.engine).local_platforms]
    if elsewhere:
        several = len(elsewhere) > 1
        raise BadInput(f"plan {root}: pool{'s' * several} {', '.join(elsewhere)} {'are' if several else 'is'} not vLLM "
                       "on this host's CPUs: deploy --local runs only plans compiled for cpu-host devices, on "
                       "vLLM's CPU build here; deploy this plan with its manifests (DIR/k8s) on the devices it names")
    if plan.needs_runtime:
        need = plan.needs_runtime[0]
        raise BadInput(f"plan {root}: {need.feature} ({', '.join(need.pools)}) runs on no public engine: {need.why}; "
                       "run it on the reference runtime (`gimletc run` / `gimletc serve`), or recompile with "
                       "--deployable")
    if not pools:
        raise BadInput(f"plan {root}: no pool has an engine launch; recompile it with this gimletc")
    for p in pools:
        if p.tp * p.pp != 1:
            raise BadInput(f"plan {root}: pool {p.name} has tp {p.tp} x pp {p.pp}; deploy --local starts one engine "
                           "process per replica on one host: compile with count 1 per replica")
    if not (root / "model" / "config.json").exists() or not any((root / "model").glob("*.safetensors")):
        raise BadInput(f"plan {root}: no model weights in {root / 'model'}; compile a tiny preset (weights are "
                       "written under 2 GB) or pass --weights CKPT_DIR")
    return pools


class Deployment:
    """The processes of one local deployment; `start` them, `watch` them, `stop` them (idempotent). Without a
    `plan` (an engine started to be measured, ``gimletc calibrate --engine``) no ``endpoints.json`` is written."""

    def __init__(self, root: Path, plan: Plan | None, procs: list[Proc], *, python: Path | None = None,
                 router: Path | None = None, kv_dir: Path | None = None):
        self.root, self.plan, self.procs = root, plan, procs
        self.python, self.router, self.kv_dir = python, router, kv_dir  # what `apply` starts new replicas with
        self.plan_root = root  # the directory of the plan it runs (another one after `apply`)
        self.ready_timeout_s = 900.0  # how long engines may take to answer /health: `start`'s, and `apply`'s after it
        self.closing = False  # set by `stop`: a `watch` in another thread returns instead of reporting the exits

    def start(self, ready_timeout_s: float, progress: Callable[[str], None]) -> None:
        self.spawn_engines(progress)
        self.finish_start(ready_timeout_s, progress)

    def spawn_engines(self, progress: Callable[[str], None]) -> None:
        """Start the engines (`finish_start` waits for them and starts the routers)."""
        engines = [p for p in self.procs if p.pool not in ROUTERS]
        for p in engines:
            self.spawn(p)
        progress(f"started {len(engines)} vLLM engine(s); waiting for /health (about 90 s each, longer side by side)")

    def finish_start(self, ready_timeout_s: float, progress: Callable[[str], None]) -> None:
        self.ready_timeout_s = ready_timeout_s
        engines = [p for p in self.procs if p.pool not in ROUTERS]
        self._await_engines(engines, ready_timeout_s, progress)
        for pool in ROUTERS:  # the plan's router, then the front, whose one worker it is
            for p in [p for p in self.procs if p.pool == pool]:
                self._start_router(p, progress)
        if self.plan is not None:
            self._write_endpoints()
        front = self.proc(FRONT)
        progress(f"ready: router at {front.url}" if front else "ready")

    def _await_engines(self, engines: list[Proc], timeout_s: float, progress: Callable[[str], None]) -> None:
        """Wait for `engines` to answer /health. [Note: ports chosen at start] An engine's port is picked before it
        starts and bound some seconds later, once its imports are done; an engine that exited because another
        process took its port in between ("Address already in use") starts again on another port, once, and the
        routers (started after) take its new URL."""
        deadline = time.monotonic() + timeout_s
        retried: set[str] = set()
        while True:
            try:
                self._await_health(engines, max(1.0, deadline - time.monotonic()))
                return
            except RuntimeFailure:
                dead = [p for p in engines if p.popen is not None and p.popen.poll() is not None]
                lost = [p for p in dead if p.name not in retried and "Address already in use" in _tail(p.log_path)]
                if not dead or len(lost) < len(dead):
                    raise
            for p in lost:
                retried.add(p.name)
                old = p.port
                p.port = free_port()
                p.argv = set_flag(p.argv, "--port", str(p.port))
                progress(f"{p.name}: port {old} was taken before it bound it; starting it again on port {p.port}")
                self.spawn(p)

    def _start_router(self, p: Proc, progress: Callable[[str], None]) -> None:
        """[Note: ports chosen at start] Start a router on ports picked now, once every engine listens; a port taken
        in the instant between picking and binding is picked again, once, and said."""
        for attempt in (1, 2):
            self._rebind(p)
            self.spawn(p)
            try:
                self._await_health([p], 60.0)
                return
            except RuntimeFailure as e:
                if attempt == 2 or "Address already in use" not in _tail(p.log_path):
                    raise
                progress(f"{p.name}: a port it was given was taken before it bound it ({str(e).splitlines()[0]}); "
                         "starting it again on other ports")

    def _rebind(self, p: Proc) -> None:
        """[Note: ports chosen at start] Give router `p` fresh ports (its own and its metrics'); the front's one
        worker is the plan's router, wherever that now listens.

        [Note: ports chosen at start] A port picked by binding to port 0 and closing is free only at that moment:
        the engines start minutes later, open ports of their own (their API, the engine core's sockets), and took
        a router's port picked up front in 1 of 3 starts here ("Address already in use" from its metrics
        listener). So routers get their ports when they start, after the engines listen."""
        p.port = free_port()
        if p.pool == ROUTER and self.plan is not None and self.router is not None:  # the engines' URLs as they are
            urls: dict[str, list[str]] = {}
            for q in sorted((q for q in self.procs if q.pool not in ROUTERS), key=lambda q: (q.pool, q.replica)):
                urls.setdefault(q.pool, []).append(q.url)
            p.argv = router_command(self.plan, self.router, p.port, urls)
        p.argv = set_flag(set_flag(p.argv, "--port", str(p.port)), "--prometheus-port", str(free_port()))
        if p.pool == FRONT and (router := self.proc(ROUTER)) is not None:
            p.argv = set_flag(p.argv, "--worker-urls", router.url)

    def proc(self, pool: str) -> Proc | None:
        return next((p for p in self.procs if p.pool == pool), None)

    def spawn(self, p: Proc) -> None:
        p.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(p.log_path, "wb") as out:
            p.popen = subprocess.Popen(p.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=p.env, start_new_session=True)
        if p.cpus and hasattr(os, "sched_setaffinity"):  # before the new interpreter has imported or started anything
            try:
                os.sched_setaffinity(p.popen.pid, p.cpus)
            except OSError as e:
                log.warning("%s: could not keep it on cores %s (%s); it runs wherever the host puts it", p.name,
                            p.cpus, e)
        log.info("started %s (pid %d): %s", p.name, p.popen.pid, " ".join(p.argv))

    def _await_health(self, procs: list[Proc], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(procs)
        while waiting:
            self.check_alive()
            waiting = [p for p in waiting if not healthy(p.url)]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(p.name for p in waiting)
                raise RuntimeFailure(f"{names} not healthy after {timeout_s:.0f} s; see {waiting[0].log_path}")
            if waiting:
                time.sleep(1.0)

    def check_alive(self) -> None:
        """`RuntimeFailure` naming the first process that exited (with the end of its log)."""
        for p in self.procs if not self.closing else ():
            if p.popen is not None and p.popen.poll() is not None:
                pools = self.plan.pools if self.plan is not None else ()
                role = next((f"{q.role} engine" for q in pools if q.name == p.pool),
                            {ROUTER: "vllm-router", FRONT: "vllm-router in front of the plan's router"}.get(
                                p.pool, "vLLM engine"))
                raise RuntimeFailure(f"{p.name} ({role}) exited with code {p.popen.returncode}; "
                                     f"log {p.log_path}:\n{_tail(p.log_path)}")

    def watch(self, until: float | None, progress: Callable[[str], None] = log.info) -> None:
        """Block until `until` (monotonic seconds; None: for ever) or a process dies (`RuntimeFailure`); apply
        a replan when one asks ([Note: applying a replan locally] in `compiler.deploy.apply`)."""
        from compiler.deploy.apply import pending

        while (until is None or time.monotonic() < until) and not self.closing:
            self.check_alive()
            for work in self.work_dirs() if self.plan is not None else ():
                request = pending(work)
                if request is not None:
                    self.apply(request, progress, work)
            time.sleep(0.5)

    def work_dirs(self) -> list[Path]:
        """Where the deployment answers: the deployed plan's ``deploy/`` folder and, after an apply, the running
        plan's (so ``gimletc replan DIR2 --apply`` finds the deployment that DIR2 was applied to)."""
        return list(dict.fromkeys([self.root / "deploy", Path(self.plan_root) / "deploy"]))

    def apply(self, request: dict, progress: Callable[[str], None], work: Path | None = None) -> None:
        """Run the plan `request` names, keeping the replicas whose shape stays (`compiler.deploy.apply`); the
        answer goes to `work` (where the request was found)."""
        from compiler.deploy.apply import answer, reconcile, shape

        work, logs, ident = work or self.root / "deploy", self.root / "deploy" / "logs", str(request.get("id", ""))
        try:
            nxt_root = Path(request["plan"])
            nxt, local = load_local(nxt_root)
            pools = {p.name: p for p in local}
        except (BadInput, KeyError, TypeError) as e:
            answer(work, ident, None, f"{type(e).__name__}: {e}")
            return
        options = {p.name: p.option for p in self.plan.pools}
        running = [(p.pool, p.replica, shape(options[p.pool])) for p in self.procs if p.pool not in ROUTERS]
        change = reconcile(running, [(p.name, shape(p.option), p.replicas) for p in pools.values()])
        progress(f"applying {nxt_root}: starting {len(change.started)}, stopping {len(change.stopped)}, keeping "
                 f"{len(change.kept)} engine replica(s)")
        # Make before break: the next plan's new engines start while the running ones and the router serve; then
        # the router routes the next plan's way ([Note: handing over the router]); then the leaving replicas
        # drain and stop.
        leaving = [p for p in self.procs if (p.pool, p.replica) in set(change.stopped)]
        base_env = outside_env()
        new = []
        order = [(p.name, r) for p in pools.values() for r in range(p.replicas)]  # the next plan's engines
        # the cores each keeps once the leaving ones stop
        cores = dict(zip(order, core_shares([pools[name].role for name, _r in order])))
        for name, r in change.started:
            new.append(engine_proc(pools[name], r, self.python, nxt_root, self.kv_dir,
                                   logs / f"{name}-{r}-{ident[:8]}.log", base_env, *cores[name, r]))
        try:
            for p in new:
                self.spawn(p)
            self.procs += new
            self._await_health(new, self.ready_timeout_s)
            renamed = dict(change.kept)
            for p in self.procs:
                if p.pool not in ROUTERS and p not in new and p not in leaving:
                    p.pool, p.replica = renamed[(p.pool, p.replica)]
            self._hand_over(nxt, [p for p in self.procs if p.pool not in ROUTERS and p not in leaving],
                            logs / f"router-{ident[:8]}.log", progress)
            _drain(leaving, DRAIN_S)
            self.stop_procs(leaving)
            self.procs = [p for p in self.procs if p not in leaving]
        except RuntimeFailure as e:
            answer(work, ident, None, str(e))
            raise
        previous = self.plan_root
        self.plan, self.plan_root = nxt, nxt_root
        if Path(previous) != self.root and Path(previous) != Path(nxt_root):  # it no longer runs there
            (Path(previous) / "deploy" / "endpoints.json").unlink(missing_ok=True)
        self._write_endpoints()
        answer(work, ident, change)
        progress(f"now running {nxt_root}")

    def _hand_over(self, nxt: Plan, engines: list[Proc], log_path: Path, progress: Callable[[str], None]) -> None:
        """Make the router send requests to `engines` the way `nxt`'s router would, without closing the
        deployment's URL ([Note: handing over the router]): through the running router's API where it can
        change in place, else by a new router that takes the old one's place behind the front."""
        old, front = self.proc(ROUTER), self.proc(FRONT)
        urls: dict[str, list[str]] = {}
        for p in sorted(engines, key=lambda q: (q.pool, q.replica)):
            urls.setdefault(p.pool, []).append(p.url)
        routed = nxt.router is not None and nxt.router.router == "vllm-router"
        if old is not None and routed:
            metrics_port = old.argv[old.argv.index("--prometheus-port") + 1]
            wanted = set_flag(router_command(nxt, self.router, old.port, urls), "--prometheus-port", metrics_port)
            moves = router_moves(old.argv, wanted)
            if moves is not None:
                tell(old.url, moves)
                old.argv = wanted
                progress(f"router: {len(moves.add)} engine(s) added, {len(moves.remove)} removed in place")
                if moves.remove:
                    time.sleep(SETTLE_S)  # requests the router chose a leaving engine for before it was removed
                return
        router = None
        if routed:
            port = free_port()
            router = Proc(ROUTER, 0, port, router_command(nxt, self.router, port, urls), log_path, env=outside_env())
            self.spawn(router)
            self.procs.append(router)
            self._await_health([router], 60.0)
        if router is not None and front is None:
            front = front_proc(self.router, router.url, log_path.with_name(f"front-{log_path.name}"), outside_env())
            self.spawn(front)
            self.procs.append(front)
            self._await_health([front], 60.0)
        elif router is not None:
            tell(front.url, RouterMoves((router.url,), (old.url,) if old is not None else ()))
        elif front is not None:  # the next plan has no vllm-router: clients reach its engines at their own URLs
            self.procs.remove(front)
            self.stop_procs([front])
        if old is not None:
            self.procs.remove(old)
            time.sleep(SETTLE_S)  # requests the front chose the old router for before it was removed
            self.stop_procs([old], grace_s=DRAIN_S)  # SIGTERM: vllm-router finishes what it holds, then exits
        progress("router: the next plan's router took over behind the front" if router is not None else
                 "router: none in the next plan")

    def stop_procs(self, procs: list[Proc], grace_s: float = STOP_GRACE_S) -> None:
        for p in procs:
            if p.popen is not None and p.popen.poll() is None:
                _signal_group(p.popen, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in procs:
            if p.popen is None:
                continue
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p.popen, signal.SIGKILL)  # the group: vLLM's engine-core child outlives its parent
            p.popen.wait()

    def stop(self) -> None:
        self.closing = True
        self.stop_procs(self.procs)
        for work in self.work_dirs():
            (work / "endpoints.json").unlink(missing_ok=True)

    def _write_endpoints(self) -> None:
        router = self.proc(FRONT)
        data = {"router": router.url if router else None, "model": self.plan.model, "plan": str(self.plan_root),
                "deployer_pid": os.getpid(),
                "served_model_name": self.plan.pools[0].launch.served_model_name if self.plan.pools[0].launch
                else self.plan.model,
                "processes": [{"pool": p.pool, "replica": p.replica, "url": p.url, "pid": p.popen.pid,
                               "log": str(p.log_path), "added_to_launch": p.added} for p in self.procs]}
        for work in self.work_dirs():
            atomic_write_text(work / "endpoints.json", json.dumps(data, indent=1) + "\n")


def _signal_group(popen: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(procs: list[Proc], timeout_s: float) -> None:
    """Wait until `procs` hold no request (vLLM's ``vllm:num_requests_running`` and ``..._waiting`` gauges read 0
    twice, 1 s apart: the gauges move when the engine steps, not when a request arrives), at most `timeout_s`; an
    engine whose metrics cannot be read counts as drained."""
    deadline = time.monotonic() + timeout_s
    busy, quiet = list(procs), set()
    while busy and time.monotonic() < deadline:
        idle = {id(p) for p in busy if _requests_held(p.url) <= 0}
        busy, quiet = [p for p in busy if id(p) not in idle & quiet], idle
        if busy:
            time.sleep(1.0)


def _requests_held(url: str) -> float:
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            text = r.read().decode(errors="replace")
    except (OSError, ValueError):
        return 0.0
    held = 0.0
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            try:
                held += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return held


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def prepare(root: str | Path, python: Path, router: Path,
            loaded: tuple[Plan, list[Pool]] | None = None, *, cores: tuple[int, int] | None = None) -> Deployment:
    """The processes that deploy the plan in `root` (`loaded`: what `load_local` read of it; nothing started yet).
    `cores`: (the index of its first engine, engines on this host in all) when other plans' engines share the host
    ([Note: engines sharing this host]); default: its own engines only."""
    root = Path(root)
    plan, pools = loaded or load_local(root)
    work = root / "deploy"
    kv_dir = work / "kv"
    shutil.rmtree(kv_dir, ignore_errors=True)  # KV of an earlier run must not be mistaken for this run's
    kv_dir.mkdir(parents=True)
    procs, urls = [], {}
    base_env = outside_env()
    first, engines = cores if cores is not None else (0, sum(pool.replicas for pool in pools))
    bound = core_shares([pool.role for pool in pools for _r in range(pool.replicas)], first, engines)
    for pool in pools:
        for r in range(pool.replicas):
            procs.append(engine_proc(pool, r, python, root, kv_dir, work / "logs" / f"{pool.name}-{r}.log", base_env,
                                     *bound[len(procs)]))
            urls.setdefault(pool.name, []).append(procs[-1].url)
    if plan.router is not None and plan.router.router == "vllm-router":
        port = free_port()
        procs.append(Proc(ROUTER, 0, port, router_command(plan, router, port, urls), work / "logs" / "router.log",
                          env=base_env))
        procs.append(front_proc(router, procs[-1].url, work / "logs" / "front.log", base_env))
    return Deployment(root, plan, procs, python=python, router=router, kv_dir=kv_dir)


def uncalibrated(plan: Plan) -> str | None:
    """Why `gimletc bench` would compare this deployment with unbounded predictions (no calibration profile in the
    plan and no engine record of this host's vLLM, `gimletc calibrate --device cpu-host --engine vllm`), with the
    fix; None when it will not."""
    from compiler.ir.calibration import load_engine_record

    if any(c.kind == "profile" for c in plan.calibrations) or load_engine_record("cpu-host", "vllm") is not None:
        return None
    return ("this host's vLLM engine was never measured: the plan's predictions for cpu-host are unbounded, and "
            "`gimletc bench` will compare against them; measure it with `gimletc calibrate --device cpu-host --engine "
            "vllm` (10-20 minutes on two cores, once) and recompile, or deploy with --calibrate to measure it first")


def deploy_local(root: str | Path, *, for_s: float | None = None, ready_timeout_s: float = 900.0,
                 progress: Callable[[str], None] = log.info,
                 calibrate: Callable[[Callable[[str], None]], None] | None = None) -> None:
    """Run the plan in `root` on local vLLM engines until interrupted, `for_s` elapses, or a process dies. Where
    bench would compare it with unbounded predictions (`uncalibrated`), say so, or run `calibrate` first (the CLI's
    ``--calibrate``: ``gimletc calibrate --device cpu-host --engine vllm``)."""
    loaded = load_local(Path(root))  # a plan that cannot run here is refused before minutes of engine set-up
    missing = uncalibrated(loaded[0])
    if missing and calibrate is not None:
        progress("measuring this host's vLLM engine first (gimletc calibrate --device cpu-host --engine vllm, "
                 "10-20 minutes): bench's predictions are then the engine's as measured here")
        calibrate(progress)
    elif missing:
        progress(f"note: {missing}")
    python = engine_python(progress)
    run_until_stopped(prepare(root, python, router_binary(), loaded), ready_timeout_s, for_s, progress)


def run_until_stopped(deployment, ready_timeout_s: float, for_s: float | None,
                      progress: Callable[[str], None]) -> None:
    """Start `deployment` (a `Deployment`, or anything with its start, watch and stop), watch it until interrupted,
    `for_s` elapses or a process dies, and stop it however that ends; SIGTERM stops it like Ctrl-C."""
    def on_signal(_signum, _frame):  # SIGTERM: stop like Ctrl-C (an orchestrator's or a test's stop)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        deployment.start(ready_timeout_s, progress)
        deployment.watch(None if for_s is None else time.monotonic() + for_s, progress)
    except KeyboardInterrupt:
        progress("stopping")
    finally:
        # a second SIGTERM or Ctrl-C while stopping would cut the stop short and leave engines running
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            deployment.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
