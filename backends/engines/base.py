"""What every serving engine provides; defaults live here so a new engine is one small module.

A serving engine is a public program that serves a model over an OpenAI-compatible API (vLLM, SGLang,
TensorRT-LLM, Optimum-Habana), or ``external``: a vendor's system that serves one itself. Its module holds
everything gimletc knows about it: the release the launch flags are written for and where its images are
documented, its step costs (``costs``: fitted times, budget, overlap and mixing rules, with sources; the
arithmetic on them is `cost_models.engines`'), its command line (`ServingEngine.launch`), the KV connectors it speaks (`connectors`), the router
in front of its pools (`router`), its Prometheus metric names (`metrics`), how a replica spans nodes, what
the Kubernetes targets run it with, and whether `gimletc deploy --local` starts it here.

To add an engine: subclass `ServingEngine` in one module that sets ``ENGINE``, and add the module to
`backends.engines.BUILTIN` or expose the instance through the ``gimletc.engines`` entry-point group
(tests/backends/test_engines.py adds a stub one). A backend then lists it among its `EnginePlatform`s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cost_models.engines import Engine
    from cost_models.buckets import Buckets

PORT = 8000
#: Where the plan directory is mounted in a container (`compiler.emit.k8s`) and so where ``model/`` is found.
PLAN_MOUNT = "/plan"
#: Hugging Face dtype names the engines' ``--dtype`` takes (fp8 and fp4 checkpoints compute in bf16).
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "fp4": "bfloat16"}

COMMON_RULES = (
    "same KV dtype on both sides",
    "same attention page format on both sides (or the connector's post-processing)",
    "one block size on both sides: the larger platform block size",
    "a layout that differs (NHD/HND) is permuted on the receiving side",
)


@dataclass(frozen=True, slots=True)
class Connector:
    """One KV connector an engine speaks: it moves KV from `src` platform engines to `dst` platform engines
    (`compiler.emit.serving.connectors` chooses among them and explains the rules)."""

    engine: str
    src: str
    dst: str
    name: str  # vLLM: kv_connector class; SGLang: --disaggregation-transfer-backend; TensorRT-LLM: cache backend
    buffer_device: str  # "cuda": device memory registered directly; "cpu": staged through host memory
    source: str
    rules: tuple[str, ...] = ()
    equal_tp: bool = False
    local_only: bool = False  # moves KV through a filesystem both engines mount (one host, or a shared volume)

    def all_rules(self) -> list[str]:
        out = list(COMMON_RULES) + list(self.rules)
        if self.equal_tp:
            out.append("equal tensor-parallel size on both sides")
        if self.local_only:
            out.append("both engines mount the same shared_storage_path")
        return out


class KvEnd(Protocol):
    """The side of a KV connector a launch is written for (`compiler.plan.schema.KvConnector`)."""

    name: str
    role: str  # kv_producer (prefill) or kv_consumer (decode)
    buffer_device: str
    layout: str


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """What one pool's launch is written from: its parallelism and batch, the engine's per-step token budget
    the cost model assumed (``budget``), and the model as the plan serves it."""

    pool: str
    tp: int
    pp: int
    batch: int
    budget: int
    model: str  # the checkpoint reference (`compiler.emit.serving.launch.model_reference`)
    served_model_name: str
    dtype: str
    kv_dtype: str
    moe: bool
    max_model_len: int
    block_size: int
    image: str | None  # the cluster file's image, else the platform's
    endpoints: tuple[str, ...] = ()
    buckets: Buckets | None = None  # the static shapes a Neuron launch compiles ([Note: buckets])


@dataclass(frozen=True, slots=True)
class RouterCommand:
    """The router in front of one engine's pools: which program, its command line and the files it reads."""

    router: str
    version: str
    image: str | None
    command: list[str]
    policy: str
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Upstreams:
    """The engine URLs a router fronts: ``first`` the replicas that take requests first (prefill pools under P/D,
    else colocated ones), ``decode`` the decode pools' replicas; ``pd`` whether requests go prefill -> decode."""

    pd: bool
    first: list[str]
    decode: list[str]
    kv_connector: str | None  # the first pools' connector name, where one is set


class ServingEngine:
    name: str = ""  # the cluster file's ``engine:`` and plan.json's ``launch.engine``
    display: str = ""  # how people write it: vLLM, SGLang, TensorRT-LLM
    release: str = ""  # the release the launch flags are written for
    launchable: bool = True  # gimletc writes a process to start (False: an external system serves itself)
    #: What its scheduler adds to a step's device time, with sources (`cost_models.engines.Engine`, the arithmetic
    #: on it there); None where nothing is costed under this engine's name (an external system's own figures).
    costs: Engine | None = None
    connectors: tuple[Connector, ...] = ()
    #: Splits attention heads evenly over tensor-parallel ranks, replicating KV heads where tp exceeds them
    #: (`compiler.driver` refuses the splits it cannot run).
    even_heads: bool = False
    #: Prometheus names of what gimletc reads off an engine (`compiler.deploy.metrics.NAMES` keys), newest first;
    #: ``request_tpot_s`` is each request's own mean time per output token (one sample per request, as
    #: benchmarks count TPOT), ``tpot_s`` the time between tokens.
    metrics: dict[str, tuple[str, ...]] = {}
    #: How a replica spans nodes: "Ray", "torch.distributed", or None where the Kubernetes targets cannot start it.
    multi_node: str | None = None
    multi_node_refusal: str = ""  # why not, where `multi_node` is None
    dynamo_runtime: str | None = None  # the NVIDIA Dynamo runtime image of this framework (None: Dynamo lacks it)
    #: Orchestrators whose serving objects run this engine (llm-d's guides and KServe's LLMInferenceService: vLLM).
    orchestrators: tuple[str, ...] = ()
    local_platforms: tuple[str, ...] = ()  # builds `gimletc deploy --local` starts on this host
    #: `gimletc calibrate --engine` can start it on this host and sweep it with its own benchmark client.
    calibrated_here: bool = False

    def launch(self, x: LaunchInputs, connector: KvEnd | None) -> tuple[list[str], dict[str, str]]:
        """The engine's command line for one replica of pool `x`, and the files it reads (paths relative to the
        plan directory)."""
        return [], {}

    def router(self, up: Upstreams, image: str | None) -> RouterCommand | None:
        """The router in front of this engine's pools (`image`: the pools' own image, for a router they ship)."""
        return None

    def dynamo_args(self, argv: list[str], role: str, served_model_name: str) -> list[str]:
        """The launch's flags in Dynamo's wrapper (``python3 -m dynamo.<name>``) for a pool of `role`."""
        raise NotImplementedError(f"Dynamo runs no {self.display}")

    def multi_node_commands(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """``(leader command, worker command)`` of a replica spanning nodes (see `multi_node`)."""
        raise NotImplementedError(self.multi_node_refusal)

    def local_flags(self, argv: list[str]) -> list[str] | None:
        """The engine flags of launch `argv` that `gimletc deploy --local` passes to its own server process here
        (the model and server command are its own), or None where deploy --local does not start this engine."""
        return None

    def queue_metric(self) -> str | None:
        """The gauge of requests waiting for a slot (what an autoscaler scales on), if the engine exports one."""
        return (self.metrics.get("waiting") or (None,))[0]


def drop_flags(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """`argv` without each of `flags` and the value after it.

    >>> drop_flags(["--a", "1", "--host", "x", "--b"], ("--host",))
    ['--a', '1', '--b']
    """
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            out.append(arg)
    return out


def options_yaml(value: dict, indent: int = 0) -> str:
    """A small, deterministic YAML writer for nested string/number maps (what engine option files hold)."""
    out = []
    for key in sorted(value):
        v = value[key]
        if isinstance(v, dict):
            out.append(" " * indent + f"{key}:")
            out.append(options_yaml(v, indent + 2).rstrip("\n"))
        else:
            out.append(" " * indent + f"{key}: {json.dumps(v)}")
    return "\n".join(out) + "\n"
