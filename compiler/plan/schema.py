"""The plan: what `gimletc compile` writes to ``DIR/plan.json`` and what ``run`` will read.

A pydantic model, so ``plan.json`` has a JSON Schema (`gimletc schema`) and
loading it validates without executing anything (JSON only, no pickle).
Versioned by ``schema_version``. Every metric in it is a prediction of the
cost model (``predicted``), never a measurement.

Contents: the model (preset or config hash, dtype), the cluster and workload
it was compiled for, the pools (device type, devices per replica, replicas,
tensor and pipeline parallelism, batch, role and the blocks each pipeline
stage runs), the transfers between pools (KV hand-offs, per-layer
activations), the predicted totals, the solver report and the baselines.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


def _registered_engine(name: str) -> str:
    """A serving engine's name as `backends.engines` registers it (plug-ins included)."""
    from backends.engines import find, serving_engines

    if find(name) is None:
        raise ValueError(f"{name!r} is not a registered serving engine; use one of "
                         f"{', '.join(e.name for e in serving_engines())} (or install the engine's plugin)")
    return name


#: A `backends.engines` name: vllm, sglang, trtllm, external, or a plug-in's.
EngineName = Annotated[str, AfterValidator(_registered_engine)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RankExec(_Frozen):
    """One tensor-parallel rank of a stage: its slice of heads and FFN, and its files (paths relative to the plan)."""

    tp_rank: int
    q_heads: list[int]  # [first, end) of the model's query heads
    kv_heads: list[int]  # [first, end) of the model's KV heads
    ffn_slice: list[int]  # [first, end) of the FFN (per expert) intermediate dimension
    program: str  # generated Python stage program
    weights: str | None = None  # safetensors shard (absent when weights were not emitted)
    onnx: str | None = None


class StageExec(_Frozen):
    """What a stage worker needs to execute a stage (`compiler.emit.stage_programs`); see docs in that module."""

    role: str
    layers: list[int]  # [first, end) of the decoder layers whose blocks this stage runs
    tp: int
    pp: int
    dtype: str  # dtype the programs and shards compute in
    kv_dtype: str
    kv_layout: Literal["HND"] = "HND"  # page = (kv heads, tokens, head dim)
    kv_block_size: int  # tokens per KV page
    ranks: list[RankExec]


class Stage(_Frozen):
    """One pipeline stage of a replica: the blocks it runs, in order, per phase."""

    index: int
    device: str
    blocks: list[str]
    execution: StageExec | None = None  # set when stage programs were emitted


class Conversion(_Frozen):
    """An explicit step on a transfer: a dtype cast or a layout permute, at the sender or the receiver."""

    op: Literal["cast", "permute"]
    src: str
    dst: str
    at: Literal["sender", "receiver"]


class HeadPair(_Frozen):
    """Who sends which KV to whom: a prefill rank's layers x KV heads that land on one decode rank."""

    src_stage: int
    src_tp_rank: int
    dst_stage: int
    dst_tp_rank: int
    layers: list[int]  # [first, end)
    kv_heads: list[int]  # [first, end) in the model's KV-head numbering


class TransferDetail(_Frozen):
    """What one edge carries, in which layout and dtype, and exactly how many bytes per token."""

    carries: Literal["kv_pages", "hidden_states", "draft_tokens"]
    layout: str
    dtype: str
    dst_dtype: str
    bytes_per_token: int  # kv_pages: per prompt token handed off; hidden_states: per token per crossing
    crossings_per_token: int  # hidden_states: 2 x layers per decode token; kv_pages: 1
    block_size: int | None = None
    conversions: list[Conversion] = []
    pairs: list[HeadPair] = []


#: An 80% interval in plan.json: ``[lo, hi]``, ``hi`` null where nothing measured bounds it ([Note: prediction
#: intervals] in compiler/ir/prediction.py).
Bounds = list[float | None]


class PoolClass(_Frozen):
    """One request class on one pool, at the pool's predicted utilisation (predictions)."""

    name: str
    requests_per_s: float
    # colocated, prefill: time to first token; decode: none ([Note: no TTFT on a decode pool])
    ttft_p50_ms: float | None
    ttft_slo_percentile_ms: float | None
    tpot_p50_ms: float | None
    tpot_slo_percentile_ms: float | None
    ttft_slo_percentile_interval_ms: Bounds | None = None  # 80% interval of ttft_slo_percentile_ms
    tpot_slo_percentile_interval_ms: Bounds | None = None
    # decode pools: a handed-off request's wait for a decode slot, part of its class's TTFT
    slot_wait_p50_ms: float | None = None
    slot_wait_slo_percentile_ms: float | None = None
    slot_wait_slo_percentile_interval_ms: Bounds | None = None


class Draft(_Frozen):
    """Speculative decoding on a decoding pool: which drafter pool drafts, with which model, how many tokens.

    The drafter pool has role ``drafter`` and stages over the draft model's blocks; replica r of this pool
    uses drafter replica r % its replicas; a ``draft`` transfer (src: the drafter pool, dst: the pool holding
    this pool's decode ``embed``) carries the draft tokens. See [Note: speculative decoding] in
    compiler/runtime/speculative.py.
    """

    pool: str  # the drafter pool (role "drafter")
    model: str  # the draft model (preset, config path), same vocabulary as the plan's model
    model_sha256: str
    k: int = Field(ge=1, le=64)  # tokens drafted per verification; the target verifies k + 1 positions in one step
    predicted_acceptance_rate: float | None = Field(default=None, ge=0.0, le=1.0)  # assumed α (a prediction)


class KvConnector(_Frozen):
    """How a prefill or decode engine hands KV over to its peers (`compiler.emit.serving.connectors`)."""

    name: str  # vLLM connector class, SGLang transfer backend or TensorRT-LLM cache-transceiver backend
    role: Literal["kv_producer", "kv_consumer"]
    peers: list[str]  # the pools on the other side
    buffer_device: str  # where the engine registers its KV for transfer: device memory ("cuda") or host ("cpu")
    block_size: int  # tokens per KV block, the same on both sides
    layout: str  # the KV page layout both sides are set to
    rules: list[str]  # the compatibility rules this pair was checked against


class EngineLaunch(_Frozen):
    """How one pool runs on a public serving engine: the process each replica starts (`compiler.emit.serving`).

    ``command`` is the full argument vector (the engine's own CLI; ``model`` appears in it as given);
    ``files`` are extra files it reads, written under ``DIR/engines/`` (paths relative to the plan). An
    ``external`` pool runs no process of ours: its systems serve an OpenAI-compatible API at ``endpoints``.
    """

    engine: EngineName
    version: str
    platform: str  # cuda, rocm, neuron, gaudi, cpu, external
    plugin: str | None = None  # the platform plugin the image carries (vllm-neuron, vllm-gaudi)
    image: str | None  # None: no public image; set `image:` in the cluster file
    model: str  # checkpoint the engine serves: a Hugging Face id, or a path inside the container
    served_model_name: str
    command: list[str]
    env: dict[str, str] = {}
    port: int
    files: dict[str, str] = {}
    endpoints: list[str] = []
    max_model_len: int
    kv_connector: KvConnector | None = None
    notes: list[str] = []


class RuntimeNeed(_Frozen):
    """A plan feature no public engine runs: it needs the reference runtime (`gimletc run` / `serve`)."""

    feature: Literal["attention-ffn-split", "drafter-on-other-silicon", "cross-vendor-kv", "kv-without-connector",
                     "external-kv"]
    pools: list[str]
    why: str


class ClassRoute(_Frozen):
    """Where the plan sends one request class: pools and their share of the class's requests."""

    name: str
    prefill: dict[str, float] = {}  # prefill (or colocated) pool -> share
    decode: dict[str, float] = {}  # decode pool -> share (empty: the colocated pool decodes too)


class Router(_Frozen):
    """The front door: a public router's launch, the policy it runs, and what of the plan's routing it cannot
    express (`compiler.emit.serving.router`)."""

    router: str  # the engine's router (vllm-router, sglang-router, trtllm-disaggregated, a plug-in's), or none
    version: str
    image: str | None
    command: list[str]
    port: int
    mode: Literal["pd", "aggregated"]
    policy: str
    routes: list[ClassRoute]
    expresses_plan: bool  # False: the router cannot route by request class as the plan does (see notes)
    files: dict[str, str] = {}  # configuration files it reads, written under DIR/engines/
    notes: list[str] = []


#: Pool roles a request enters by (its prompt is computed there) and roles that decode it (make its output tokens).
ENTRY_ROLES = ("colocated", "prefill")
DECODE_ROLES = ("colocated", "decode")


class Pool(_Frozen):
    name: str
    role: Literal["colocated", "prefill", "decode", "decode-attention", "decode-ffn", "drafter"]
    device: str
    devices_per_replica: int
    replicas: int
    tp: int
    pp: int
    batch: int
    phases: list[Literal["prefill", "decode"]]
    stages: list[Stage]
    option: str
    engine: str = "generic"  # the serving engine the cluster file names for this device's pool
    predicted_requests_per_s: float
    # worst class, at the SLO percentile and the predicted utilisation; none on a pool that does not prefill
    # ([Note: no TTFT on a decode pool])
    predicted_ttft_ms: float | None = None
    predicted_slot_wait_ms: float | None = None  # decode pools: the worst class's wait for a slot, same percentile
    predicted_tpot_ms: float | None = None
    predicted_power_w: float
    predicted_utilisation: float = 0.0  # share of the replicas' capacity the routed classes use (< 1)
    predicted_classes: list[PoolClass] = []
    draft: Draft | None = None  # speculative decoding (colocated, decode and decode-attention pools)
    launch: EngineLaunch | None = None  # the serving engine that runs it (None: only the reference runtime does)
    # 80% intervals of predicted_ttft_ms, predicted_tpot_ms (predicted_slot_wait_ms: slot_wait_ms), and what they
    # rest on, per metric (ttft, tpot, e2e)
    predicted_intervals: dict[str, Bounds] = {}
    interval_basis: dict[str, str] = {}


class Transfer(_Frozen):
    kind: Literal["kv", "activation", "draft"]
    src_pool: str
    dst_pool: str
    predicted_requests_per_s: float
    predicted_bytes_per_s: float
    predicted_latency_ms: float
    detail: TransferDetail | None = None  # set when stage programs were emitted (`compiler.plan.transfers`)


class Predicted(_Frozen):
    requests_per_s: float
    output_tokens_per_s: float
    power_w: float  # mean draw at the solved load, on power_basis ([Note: drawn power])
    provisioned_power_w: float  # devices' rated power on power_basis, reserved against the budget
    output_tokens_per_s_per_w: float  # per watt drawn
    worst_ttft_ms: float | None
    worst_tpot_ms: float | None
    output_tokens_per_s_per_provisioned_w: float = 0.0
    cost_per_hour: float | None = None  # dollars per hour of the deployed devices (None: a type has no price)
    output_tokens_per_dollar: float | None = None
    prediction: Literal[True] = True
    # 80% intervals of requests_per_s, output_tokens_per_s, the per-watt and per-dollar figures (at the predicted
    # draw and price), worst_ttft_ms, worst_tpot_ms and power_w (between idle and rated: physics)
    intervals: dict[str, Bounds] = {}
    interval_coverage: float = 0.8


class ClassResult(_Frozen):
    """One request class end to end: its rate, its SLO, and its predicted latency on the pools it is routed to
    (the worst pool; disaggregated TTFT = prefill + KV hand-off + wait for a decode slot)."""

    name: str
    share: float
    requests_per_s: float
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_percentile: float
    ttft_p50_ms: float | None
    ttft_slo_percentile_ms: float | None
    tpot_p50_ms: float | None
    tpot_slo_percentile_ms: float | None
    meets_slo: bool  # the whole 80% interval meets every target ([Note: prediction intervals])
    pools: list[str]
    ttft_slo_percentile_interval_ms: Bounds | None = None
    tpot_slo_percentile_interval_ms: Bounds | None = None
    meets_slo_at_estimate: bool = False  # the central prediction meets every target (the interval may not)


class SensitivityResult(_Frozen):
    """An assumed efficiency factor (fewer than two measurements) moved by `change`: what the plan would do."""

    factor: str
    change: float
    objective_change: float
    changes_pools: bool
    pools_added: list[str]
    pools_removed: list[str]
    solve_gap: float = 0.0  # the re-solve's relative gap: objective_change is known to about this much


class SolverReport(_Frozen):
    """How the placement was solved. ``status`` is the solve's over the options it was given; ``bound`` and
    ``gap`` are the unpruned model's: ``pruning`` above 0 says how far the bound was widened for the options
    pruned as near-twins ([Note: pruning tolerance] in `compiler.place.candidates`; ``compile --exact`` prunes
    none)."""

    status: Literal["optimal", "feasible"]
    objective: str
    objective_value: float
    bound: float
    gap: float
    variables: int
    constraints: int
    options: int
    pruning: float = 0.0

    @property
    def described(self) -> str:
        """The status in words, as the summary and the CLI print it."""
        if self.status == "feasible":
            return f"feasible, within {100 * self.gap:.3f}% of its bound"
        if self.pruning > 0:
            return (f"optimal over the options kept after pruning near-twins (the optimum over all of them is at "
                    f"most {100 * self.gap:.3f}% higher)")
        return self.status

    @property
    def standard(self) -> str:
        """To what the baselines were solved: the plan's own standard."""
        if self.status == "feasible":
            return f"to the {100 * self.gap:.3f}% gap the plan's own solve reached (feasible: stopped within it)"
        if self.pruning > 0:
            return "as the plan's own solve: optimal over the options kept after pruning near-twins"
        return "exactly, as the plan's own solve"


def looser_baselines(baselines, solver: SolverReport) -> str:
    """The baselines that stopped at a wider gap than the plan's (vendor islands, deployable: [Note: today's
    baselines within the analysis gap] in `compiler.place.baselines`), as a clause for the sentence that gives the
    plan's standard."""
    looser = [f"{b.name} within {100 * b.gap:.1f}%" for b in baselines
              if b.status == "feasible" and b.gap is not None and b.gap > solver.gap + 1e-9]
    return f" ({', '.join(looser)}: placements the plan could choose)" if looser else ""


#: The quantities every baseline is compared on (all larger-is-better), beside the objective itself.
GAIN_METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_w", "output_tokens_per_s_per_provisioned_w",
                "output_tokens_per_dollar")


class Baseline(_Frozen):
    """A comparison placement ([Note: baselines] in `compiler.ir.placement`), solved with the plan's objective:
    what it deploys, serves, draws and costs (predictions), and how the plan compares.

    ``plan_gain`` is in the objective's own terms: how many times better the plan is (for a quantity to
    minimise, the baseline's value over the plan's); below 1 this baseline beats the plan (``beats_plan``).
    ``plan_gains`` gives the same for each of `GAIN_METRICS`; a gain is null where there is nothing to compare
    (infeasible or skipped baseline, no prices).
    """

    name: str
    question: str
    status: Literal["optimal", "feasible", "infeasible", "skipped"]
    note: str = ""
    devices: dict[str, int] = {}
    requests_per_s: float = 0.0
    output_tokens_per_s: float = 0.0
    power_w: float = 0.0  # mean draw
    provisioned_power_w: float = 0.0
    cost_per_hour: float | None = None
    output_tokens_per_s_per_w: float | None = None  # per watt drawn
    output_tokens_per_s_per_provisioned_w: float | None = None
    output_tokens_per_dollar: float | None = None
    objective_value: float | None = None  # in the unit of solver.objective
    objective_bound: float | None = None  # the baseline's own proven bound, same unit (none for greedy)
    gap: float | None = None  # its own relative gap: objective_value is known to about this much
    plan_gain: float | None = None
    plan_gains: dict[str, float | None] = {}
    beats_plan: bool = False
    prediction: Literal[True] = True
    output_tokens_per_s_interval: Bounds | None = None  # 80% interval of output_tokens_per_s
    # the plan_gain's interval with each device type off by one factor within its 80% spread ([Note: one factor
    # per device type] in compiler/emit/intervals.py); within_error: it holds 1, the model cannot tell them apart
    plan_gain_interval: Bounds | None = None
    within_error: bool = False
    # iso-power: the power it was posed at where that is the plan's provisioned power, not the budget (the
    # budget does not bind: [Note: baselines] in compiler.ir.placement); null: the budget
    posed_power_w: float | None = None


class CalibrationUsed(_Frozen):
    """A calibration a plan's predictions were made with: a profile (``--calibration``, the cluster file's
    ``calibration``) or an engine record ``gimletc calibrate --engine`` saved for a device here."""

    kind: Literal["profile", "engine record"]
    name: str
    path: str
    sha256: str  # of the file's bytes: the same calibration, byte for byte
    covers: list[str]  # device/engine pairs of the plan's pools it calibrates


class Plan(_Frozen):
    schema_version: Literal[1] = SCHEMA_VERSION
    gimletc_version: str
    model: str
    model_sha256: str
    dtype: str
    kv_dtype: str
    cluster: str
    power_budget_w: float | None
    inventory: dict[str, int]  # a `count: any` type: the most its budget buys ([Note: fleet design])
    workload: str
    mean_input_len: float
    mean_output_len: float
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    pools: list[Pool]
    transfers: list[Transfer]
    classes: list[ClassResult] = []
    predicted: Predicted
    solver: SolverReport
    baselines: list[Baseline]
    sensitivity: list[SensitivityResult] = []
    cost_budget_per_hour: float | None = None
    dense_dtype: str | None = None  # weights outside the routed experts, where the checkpoint stores them apart
    fleet_design: list[str] = []  # device types whose count the solver chose (`count: any`)
    devices_used: dict[str, int] = {}  # devices the plan deploys, per type
    prices_per_hour: dict[str, float] = {}  # dollars per device-hour, per priced type
    price_sources: dict[str, str] = {}  # where each price comes from (cluster file, or the catalog's source)
    router: Router | None = None  # the public router in front of the engines
    needs_runtime: list[RuntimeNeed] = []  # features only the reference runtime runs
    # What every watt of the plan counts ([Note: power basis] in cost_models/power.py): chip (accelerators'
    # rated power), node (their share of their nodes' wall power) or facility (node x pue). Plans written
    # before the field existed counted chip power.
    power_basis: Literal["chip", "node", "facility"] = "chip"
    pue: float | None = None  # the cluster file's facility PUE, if it gave one
    # Device types whose predictions nothing measured bounds (an uncalibrated host): no SLO is claimed met on them
    unbounded_devices: dict[str, str] = {}  # device type -> why, and the command that bounds it
    calibrations: list[CalibrationUsed] = []  # what replaced the shipped costs, with each file's sha256

    def dumps(self) -> str:
        """Canonical text: sorted keys, fixed float repr, so equal plans are equal bytes."""
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
