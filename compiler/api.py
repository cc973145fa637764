"""The Python plan API: `compile` a model into a `Plan`, save and load it, read its summary, run it, serve it,
deploy it; `estimate` one deployment; sweep a `pareto` frontier. ``import compiler`` exposes these names lazily.

[Note: plan API layering] The plan's schema (``plan.json``) is `compiler.plan.schema.Plan`, a pydantic value of
the emit stage; emit may not import the runtime or the driver (tests/test_repo.py). `Plan` here wraps that
value (``plan.document``) with what it was compiled from, and its methods reach the stages through lazy
imports, from the top of the stack like the CLI: this module sits beside `compiler.driver` and imports it and
every stage, and nothing below imports it. The CLI and this API share one home per step: the driver's passes,
`compiler.emit.artifacts.write_plan_dir`, `compiler.emit.k8s`, `write_report` below, the runtime's `Engine`.

>>> import compiler
>>> plan = compiler.compile("llama-tiny", "examples/tiny_split/cluster.yaml",
...                         "examples/tiny_split/workload.yaml")          # doctest: +SKIP
>>> plan.save("plan-tiny")                                                # doctest: +SKIP
>>> compiler.Plan.load("plan-tiny").run([[1, 2, 3]]).tokens               # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from compiler.compile_inputs import INPUTS_FILE, REPORT_DIR, CompileInputs, repeat_warnings_muted  # noqa: F401 (public)
from compiler.ir.errors import BadInput

if TYPE_CHECKING:  # typing only: importing them loads pydantic, which `import compiler` must not
    from compiler.driver import Compilation
    from compiler.plan.schema import Plan as PlanDocument
    from compiler.ir.block_graph import BlockGraph
    from compiler.ir.estimate import Estimate

#: TPOT targets of the frontier drawn in the report, and the seconds each of its solves may take (a few, and
#: short: the report stays cheap beside the compile; `gimletc pareto` draws the full sweep).
REPORT_POINTS = 3
REPORT_SOLVE_LIMIT_S = 5.0
#: Relative gap at which each of the report's solves stops: a picture affords what-if solves' gap (2%,
#: `compiler.place.ilp.ANALYSIS_GAP`); each row's status says ``feasible`` when a point stopped short of proof.
REPORT_GAP = 0.02

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunResult:
    """What `Plan.run` returns: each prompt's generated token ids, and the measured-versus-predicted report
    (the dict ``gimletc run --json`` prints: per-stage wall time here, bytes per transfer kind)."""

    tokens: list[list[int]]
    report: dict = field(repr=False)


class Plan:
    """A compiled plan: the validated ``plan.json`` document (`document`, attributes read through: ``plan.pools``,
    ``plan.predicted``...), what it was compiled from (`inputs`) and, once saved or loaded, its directory (`path`).

    Every metric in it is a prediction of the cost model.
    """

    def __init__(self, document: PlanDocument, *, inputs: CompileInputs | None = None, path: Path | None = None,
                 compilation: Compilation | None = None) -> None:
        self.document = document
        self.inputs = inputs
        self.path = path
        self._compilation = compilation

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("document", "inputs", "path"):
            raise AttributeError(name)
        return getattr(self.document, name)

    def __repr__(self) -> str:
        d = self.document
        where = f", saved at {self.path}" if self.path else ""
        return (f"<Plan {d.model} on {d.cluster} for {d.workload}: {len(d.pools)} pools, "
                f"{d.predicted.output_tokens_per_s:,.0f} output tokens/s predicted{where}>")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        """Load a plan directory (or its ``plan.json``): validated, nothing executed. `BadInput` names any problem."""
        from compiler.plan.checks import load_plan

        root = Path(path)
        root = root.parent if root.name == "plan.json" else root
        return cls(load_plan(root), inputs=CompileInputs.load(root), path=root)

    def save(self, path: str | os.PathLike, *, manifests: str = "engines", report: bool = True,
             report_points: int = REPORT_POINTS, weights: str | None = None, run_dtype: str = "fp32",
             onnx: bool = True) -> Path:
        """Write the plan directory, as ``gimletc compile --out`` does: ``plan.json``, stage programs, weight
        shards (models under 2 GB, or sliced from `weights`), ONNX, ``manifest.json``, ``k8s/`` (unless
        `manifests` is ``none``) and ``report/`` (unless `report` is False). Returns the directory."""
        from compiler.emit.artifacts import Options, write_plan_dir

        out = Path(path)
        for stale in ("k8s", REPORT_DIR):
            if (out / stale).is_dir():
                shutil.rmtree(out / stale)
        model = self.inputs.model if self.inputs else self.document.model
        self.document = write_plan_dir(self.document, model, out, Options(weights_dir=weights, run_dtype=run_dtype,
                                                                          onnx=onnx))
        if manifests != "none":
            from compiler.emit.k8s import write_manifests

            write_manifests(self.manifests(manifests), out / "k8s")
        if report:
            graph = self._compilation.prepared.graph if self._compilation else None
            write_report(self.document, out, graph=graph, inputs=self.inputs, points=report_points,
                         compilation=self._compilation)
        self.path = out
        return out

    def summary(self) -> str:
        """The plan explained in Markdown: ``report/summary.md`` (pools, counts, predicted totals, per-class
        latencies, baselines and gains, solver status, sensitivity, power)."""
        from compiler.emit.report.power import power_breakdown
        from compiler.emit.report.summary import summary_markdown

        return summary_markdown(self.document, power_breakdown(self.document))

    def manifests(self, target: str = "engines") -> dict[str, dict]:
        """The Kubernetes objects of this plan for `target` (``compiler.emit.k8s.TARGETS``: engines, dynamo,
        llm-d, kserve, gimletc, device-plugin, dra), by file name (``kustomization.yaml`` lists the others); node
        selectors, images and endpoints from the cluster file it was compiled with, when known."""
        from compiler.emit.k8s import manifests

        workload = self._compilation.prepared.workload if self._compilation is not None else None
        return manifests(self.document, self._cluster(), target=target, workload=workload)

    def _cluster(self):
        if self._compilation is not None:
            return self._compilation.prepared.cluster
        if self.inputs is not None and Path(self.inputs.cluster).is_file():
            from compiler.inputs import load_cluster

            return load_cluster(self.inputs.cluster)
        return None

    def _runnable_dir(self) -> Path:
        if self.path is None:
            raise BadInput("this plan has not been saved: call plan.save(DIR) first (running reads a plan directory)")
        return self.path

    def run(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 16, temperature: float = 0.0,
            top_p: float = 1.0, seed: int = 0, stage_timeout_s: float = 15.0) -> RunResult:
        """Execute the saved plan on this machine (a driver and one worker process per stage instance, as
        ``gimletc run``): greedy (temperature 0) or seeded sampling; prompts are token ids. Raises
        `RuntimeFailure` naming the stage if a worker dies or hangs."""
        from compiler.runtime.engine import Engine, Request
        from compiler.runtime.report import run_report

        root = self._runnable_dir()
        requests = [Request([int(t) for t in p], max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                            seed=seed + i) for i, p in enumerate(prompts)]
        engine = Engine(root, stage_timeout_s=stage_timeout_s)
        try:
            engine.run(requests)
            report = run_report(engine, requests)
        finally:
            engine.close()
        return RunResult([list(r.tokens) for r in requests], report)

    def serve(self, *, host: str = "127.0.0.1", port: int = 8000, stage_timeout_s: float = 15.0) -> int:
        """Serve the saved plan over an OpenAI-compatible HTTP API until interrupted (as ``gimletc serve``);
        returns the exit code (4 if the workers failed)."""
        from compiler.runtime.serve import serve

        return serve(self._runnable_dir(), host=host, port=port, stage_timeout_s=stage_timeout_s)

    def explain(self, target: str | None = None) -> str:
        """Why each block went where (`compiler.explanation`), as the text ``gimletc explain`` prints."""
        from compiler.explanation import explain, render_text

        return render_text(explain(self._runnable_dir(), target, inputs=self.inputs))


def compile(model: str | None = None, cluster: str | os.PathLike | None = None,
            workload: str | os.PathLike | None = None, *, services: str | os.PathLike | None = None,
            power_budget: str | float | None = None, objective: str = "throughput", slo_ttft_ms: float | None = None,
            slo_tpot_ms: float | None = None, dtype: str = "bf16", kv_dtype: str | None = None,
            time_limit_s: float = 60.0, sensitivity: bool = True, progress: Progress | None = None,
            deployable: bool = False, calibration: str | None = None) -> Plan | ServicesPlan:
    """Trace, cost, place and emit `model` on the `cluster` file's fleet for the `workload` file: the whole of
    ``gimletc compile``, in memory (`Plan.save` writes it). `power_budget` overrides the cluster file's: watts,
    or a string with its unit (``"200kW"``). Raises `BadInput` (a file, field or flag is wrong) or `Infeasible`
    (the binding constraints named). `deployable` places only what the cluster file's engines run
    (``--deployable``); `calibration` names a profile (``gimletc calibrate --from``) to cost with.

    `services` (a services file, instead of `model` and `workload`) places several models on the fleet together
    (``compile --services``, `compiler.services`) and returns a `ServicesPlan`."""
    from compiler.driver import compile as compile_pass

    if cluster is None:
        raise BadInput("compile needs a cluster file")
    if services is not None:
        if model is not None or workload is not None:
            raise BadInput("compile(services=...) places the models and workloads its file names: drop model and "
                           "workload")
        from compiler.services import compile_services

        result = compile_services(str(services), str(cluster), objective=objective,
                                  power_budget_w=_watts(power_budget), calibration=calibration,
                                  deployable=deployable, time_limit_s=time_limit_s, progress=progress)
        return ServicesPlan(result, str(Path(cluster).resolve()), _watts(power_budget), calibration, deployable)
    if model is None or workload is None:
        raise BadInput("compile needs a model and a workload file (or services=FILE for several models)")

    inputs = CompileInputs.of(model, cluster, workload, power_budget_w=_watts(power_budget), objective=objective,
                              slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, dtype=dtype, kv_dtype=kv_dtype,
                              time_limit_s=time_limit_s, deployable=deployable, calibration=calibration)
    result = compile_pass(model, inputs.cluster, inputs.workload, objective=objective, slo_ttft_ms=slo_ttft_ms,
                          slo_tpot_ms=slo_tpot_ms, precision=inputs.precision(), time_limit_s=time_limit_s,
                          analyse=sensitivity, progress=progress, deployable=deployable, **inputs.overrides())
    return Plan(result.plan, inputs=inputs, compilation=result)


class ServicesPlan:
    """Several models placed on one fleet (`compile` with ``services=``): ``plans`` (service -> `Plan`),
    ``document`` (what ``services.json`` holds), ``summary()``, ``save(path)``."""

    def __init__(self, result, cluster: str, power_budget_w: float | None, calibration: str | None,
                 deployable: bool):
        from compiler.services import services_document

        self.result, self._inputs = result, (cluster, power_budget_w, calibration, deployable)
        self.document = services_document(result)
        self.plans = {name: Plan(plan) for name, plan in result.plans.items()}

    def __repr__(self) -> str:
        return f"<ServicesPlan {self.document['name']}: {', '.join(self.plans)}>"

    def summary(self) -> str:
        from compiler.services import summary

        return summary(self.document)

    def save(self, path: str | os.PathLike, *, manifests: str = "engines") -> Path:
        """Write the services plan directory (``services.json``, ``summary.md``, a plan folder per service) as
        ``gimletc compile --services --out`` writes it."""
        from compiler.services import write_services

        cluster, power_budget_w, calibration, deployable = self._inputs
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        write_services(self.result, out, manifests, cluster=cluster, power_budget_w=power_budget_w,
                       calibration=calibration, deployable=deployable)
        self.plans = {name: Plan(plan, path=out / name) for name, plan in self.result.plans.items()}
        return out


def _watts(power: str | float | None) -> float | None:
    """``"200kW"`` / ``"1.5MW"`` / ``"800W"`` / a number of watts -> watts."""
    if power is None or isinstance(power, (int, float)):
        if power is not None and not power > 0:
            raise BadInput(f"power_budget {power!r}: give a positive number of watts or a string such as '200kW'")
        return None if power is None else float(power)
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(mw|kw|w)\s*", str(power).lower())
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"power_budget {power!r}: give watts, or a power with its unit such as '200kW', '1.5MW', '800W'")
    return float(m.group(1)) * {"mw": 1e6, "kw": 1e3, "w": 1.0}[m.group(2)]


def estimate(model: str, device: str, count: int = 1, *, tp: int | None = None, pp: int = 1, dtype: str = "bf16",
             kv_dtype: str | None = None, input_len: int = 1024, output_len: int = 256,
             batch: int | str | None = None, concurrency: int | None = None, engine: str = "generic",
             lengths: str = "fixed", context_buckets: Sequence[int] | None = None,
             token_buckets: Sequence[int] | None = None, calibration: str | None = None) -> Estimate:
    """TTFT, TPOT, throughput, memory and power of `count` devices of `device` serving `model` (predictions; as
    ``gimletc estimate``). `batch` is a number of requests started together or ``"max"``; `concurrency` closed-
    loop clients instead; neither: one request. `lengths`: ``"vary"`` where the clients' requests draw their
    lengths from a range (`input_len` and `output_len` their means), ``"fixed"`` where all are alike.
    `context_buckets`, `token_buckets`: a Neuron launch's compiled lengths (``--context-buckets``). `calibration`:
    a profile (``gimletc calibrate --from``) whose entry for the device and engine is used."""
    from compiler.driver import estimate as estimate_pass
    from compiler.inputs.scenarios import launch_buckets
    from compiler.ir.precision import Precision

    if batch is None and concurrency is None:
        batch = 1
    text = lambda v: None if v is None else ",".join(str(int(x)) for x in v)  # noqa: E731
    return estimate_pass(model, device=device, count=count, tp=tp, pp=pp, precision=Precision.of(dtype, kv_dtype),
                         input_len=input_len, output_len=output_len, batch=batch, concurrency=concurrency,
                         engine=engine, lengths=lengths, calibration=calibration,
                         buckets=launch_buckets(text(context_buckets), text(token_buckets), input_len, output_len,
                                                names=("context_buckets", "token_buckets")))


@dataclass(frozen=True)
class Frontier:
    """What `pareto` returns: a title and one row per (TPOT target, curve) (keys as in ``pareto.csv``)."""

    title: str
    points: list[dict]
    objective: str = "tokens-per-watt"  # what each point maximises

    def plot(self, path: str | os.PathLike) -> Path:
        """Draw the frontier as a PNG (matplotlib): the non-dominated points of each curve."""
        from compiler.emit.report.plots import plot_frontier

        plot_frontier(self.points, Path(path), self.title, self.objective)
        return Path(path)


def pareto(model: str, cluster: str | os.PathLike, workload: str | os.PathLike, *,
           power_budget: str | float | None = None, dtype: str = "bf16", kv_dtype: str | None = None, points: int = 8,
           time_limit_s: float = 60.0, progress: Progress | None = None, calibration: str | None = None) -> Frontier:
    """The predicted speed-vs-throughput frontier (as ``gimletc pareto``): for a sweep of TPOT targets, the plan
    and the baselines solved at each. Raises `Infeasible` when no point is feasible."""
    from compiler.sweep import pareto as pareto_pass
    from compiler.ir.precision import Precision

    budget = _watts(power_budget)
    result = pareto_pass(model, str(cluster), str(workload), precision=Precision.of(dtype, kv_dtype), points=points,
                         time_limit_s=time_limit_s, progress=progress, calibration=calibration,
                         **({"power_budget_w": budget} if budget is not None else {}))
    title, rows = _title_and_rows(result)
    return Frontier(title, list(rows), getattr(result, "objective", "tokens-per-watt"))


def _title_and_rows(result: Any) -> tuple[str, list[dict]]:
    """`compiler.sweep.pareto`'s answer as (title, rows), whether a ``(title, rows)`` pair or a value with both."""
    if isinstance(result, tuple):
        return result[0], list(result[1])
    return result.title, list(result.rows)


def report_frontier(inputs: CompileInputs, points: int, compilation: Compilation | None = None
                    ) -> tuple[list[dict] | None, str, str | None, str]:
    """(rows, title, note, objective) of the frontier the report draws: `points` TPOT targets of
    `compiler.sweep.pareto` (None and a note saying why when skipped or infeasible), each maximising `objective`
    (the plan's own where the frontier can). With the `compilation` the plan came from, its costed options and
    fleets are swept (no second trace or costing)."""
    from compiler.sweep import PARETO_OBJECTIVES, frontier, pareto as pareto_pass
    from compiler.ir.errors import Infeasible

    if points <= 0:
        return None, "", "Not computed (--report-points 0); `gimletc pareto` draws it.", ""
    limit = min(inputs.time_limit_s, REPORT_SOLVE_LIMIT_S)
    try:
        with repeat_warnings_muted():
            if compilation is not None:
                objective = compilation.solution.objective.name
                result = frontier(compilation.prepared, points=points, time_limit_s=limit,
                                  fleets=compilation.fleets or None, gap=REPORT_GAP, curves=_strongest(compilation),
                                  objective=objective if objective in PARETO_OBJECTIVES else "tokens-per-watt")
            else:
                result = pareto_pass(inputs.model, inputs.cluster, inputs.workload, precision=inputs.precision(),
                                     points=points, time_limit_s=limit, **inputs.overrides())
    except Infeasible as e:
        return None, "", f"No frontier: {e}", ""
    title, rows = _title_and_rows(result)
    return rows, title, None, getattr(result, "objective", "tokens-per-watt")


def _strongest(compilation: Compilation) -> tuple[str, ...]:
    """The single-type fleet (iso-power or iso-cost) that came closest to the plan in its compile: the one
    baseline the report's frontier draws beside the plan (``gimletc pareto`` draws them all)."""
    fleets = [b for b in compilation.plan.baselines if b.name.startswith("iso-") and b.plan_gain]
    return (min(fleets, key=lambda b: (b.plan_gain, b.name)).name,) if fleets else ()


def write_report(document: PlanDocument, out: str | os.PathLike, *, graph: BlockGraph | None = None,
                 inputs: CompileInputs | None = None, points: int = REPORT_POINTS,
                 progress: Progress | None = None, compilation: Compilation | None = None,
                 pictures: bool = True) -> list[Path]:
    """Write ``out/report/`` (`compiler.emit.report`) for the plan `document`: the frontier (`points` TPOT
    targets; needs `inputs`, and reuses `compilation`'s costing when given), then summary and ``report.json``,
    `inputs` as ``inputs.json``, and, unless `pictures` is False (`draw_report` draws them later), the timeline
    and pictures. Returns the files written."""
    from compiler.driver import block_graph
    from compiler.emit.report import build_report, draw, write_summary
    from compiler.ir.files import atomic_write_text

    folder = Path(out) / REPORT_DIR
    if inputs is not None:
        (progress or (lambda _m: None))(f"report: the frontier at {points} TPOT targets")
        rows, title, note, objective = report_frontier(inputs, points, compilation)
    else:
        rows, title, note, objective = None, "", "Not computed: the plan's compile inputs are unknown.", ""
    graph = graph if graph is not None else block_graph(inputs.model if inputs else document.model)
    report = build_report(document, graph, frontier=rows, frontier_title=title, frontier_note=note,
                          frontier_objective=objective or "tokens-per-watt")
    files = write_summary(report, folder)
    if inputs is not None:
        atomic_write_text(folder / INPUTS_FILE, inputs.to_json())
        files.append(folder / INPUTS_FILE)
    if pictures:
        files += draw(report, folder)
    return sorted(files)


def draw_report(path: str | os.PathLike, *, points: int = REPORT_POINTS) -> list[Path]:
    """Draw the timeline and pictures of the plan directory `path` from its files, as ``gimletc report DIR`` does
    ([Note: the report in the background] in `compiler.cli.report`): ``plan.json``, the frontier in
    ``report/report.json`` and the plan's BlockGraph (from the trace cache). Where ``report.json`` is missing
    (compiled with ``--no-report``), the whole report is written, its frontier `points` TPOT targets solved afresh.
    Returns the files written; none when the directory was compiled again meanwhile (its ``report.json`` changed:
    that compile draws its own)."""
    import json
    import tempfile

    from compiler.driver import block_graph
    from compiler.plan.checks import load_plan
    from compiler.emit.report import NUMBERS, build_report, draw

    root = Path(path)
    root = root.parent if root.name == "plan.json" else root
    document, inputs = load_plan(root), CompileInputs.load(root)
    folder = root / REPORT_DIR
    try:
        numbers = (folder / NUMBERS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return write_report(document, root, inputs=inputs, points=points)
    frontier = json.loads(numbers).get("frontier") or {}
    report = build_report(document, block_graph(inputs.model if inputs else document.model),
                          frontier=frontier.get("points"), frontier_title=frontier.get("title", ""),
                          frontier_objective=frontier.get("objective") or "tokens-per-watt")
    with tempfile.TemporaryDirectory(prefix=".drawing-", dir=folder, ignore_cleanup_errors=True) as work:
        drawn = draw(report, work)
        try:
            if (folder / NUMBERS).read_text(encoding="utf-8") != numbers:
                return []
        except FileNotFoundError:
            return []
        for file in drawn:
            os.replace(file, folder / file.name)
    return sorted(folder / file.name for file in drawn)


def predict_load(document: PlanDocument, *, concurrency: int, input_len: int, output_len: int) -> dict[str, Any]:
    """What the plan predicts for `concurrency` closed-loop clients sending requests of `input_len` prompt and
    `output_len` output tokens through its router (what ``gimletc bench`` measures): TTFT, TPOT and output
    tokens/s, each with its 80% interval, costed by the driver's `estimate` with the plan's own calibrations.

    [Note: a plan under a closed loop] Colocated pools: one closed loop over all their replicas (the router
    spreads the clients). A prefill -> decode split: each client's request is prefilled alone (the prefill engine
    answers one token), handed over, and decoded by the decode engine, whose first token is the client's first: TTFT
    is the prefill engine's closed loop of the clients prefilling at that moment, plus the plan's KV hand-off,
    plus one decode step; TPOT the decode engine's step at the sequences decoding at that moment. Those shares of
    the clients come from each phase's share of a request's life, solved by a few rounds of fixed point."""
    from compiler.driver import estimate
    from compiler.ir.precision import Precision

    precision = Precision.of(document.dtype, document.kv_dtype)
    profile = next((c.path for c in document.calibrations if c.kind == "profile"), None)

    def run(pool, prompt_len: int = input_len, **kw) -> Any:
        return estimate(document.model, device=pool.device, count=pool.replicas * pool.devices_per_replica,
                        tp=pool.tp, pp=pool.pp, precision=precision, input_len=prompt_len, engine=pool.engine,
                        calibration=profile, **kw)

    roles = {p.role for p in document.pools}
    if roles <= {"colocated"}:
        pool = max(document.pools, key=lambda p: p.replicas * p.devices_per_replica)
        e = run(pool, output_len=output_len, batch=None, concurrency=concurrency)
        out = {"ttft_ms": (e.ttft_ms, e.intervals["ttft_ms"]), "tpot_ms": (e.tpot_ms, e.intervals["tpot_ms"]),
               "output_tokens_per_s": (e.output_tokens_per_s, e.intervals["output_tokens_per_s"])}
        how = f"one closed loop of {concurrency} clients on {pool.name}"
    elif roles == {"prefill", "decode"}:
        out, how = _split_load(document, run, concurrency, input_len, output_len)
    else:
        raise BadInput(f"bench prediction: pools of roles {', '.join(sorted(roles))} are not predicted under a closed "
                       "loop yet (colocated pools, or one prefill and one decode role, are)")
    return {k: {"value": v, "interval": i.to_json()} for k, (v, i) in out.items()} | {"how": how}


def _split_load(document, run, concurrency: int, input_len: int, output_len: int) -> tuple[dict, str]:
    """[Note: a plan under a closed loop] for a prefill -> decode split. The decode engine's first token is one
    decode step, or, where the connector leaves part of the prompt to it ([Note: the decode engine's own prefill]
    in `compiler.emit.serving.connectors`), its prefill of those tokens (costed as a prompt of that length: the
    attention over the loaded blocks is left out)."""
    from compiler.emit.serving.connectors import recomputed_tokens
    from compiler.ir.prediction import Interval

    prefill = max((p for p in document.pools if p.role == "prefill"), key=lambda p: p.replicas)
    decode = max((p for p in document.pools if p.role == "decode"), key=lambda p: p.replicas)
    handoff_s = max((t.predicted_latency_ms for t in document.transfers if t.kind == "kv"), default=0.0) / 1e3
    connector = decode.launch.kv_connector if decode.launch is not None else None
    tail = recomputed_tokens(connector.name, input_len, connector.block_size) if connector is not None else 0
    first = run(decode, prompt_len=tail, output_len=1, batch=None, concurrency=1) if tail else None
    prefilling, decoding = float(concurrency), 1.0
    for _ in range(6):
        pre = run(prefill, output_len=1, batch=None, concurrency=max(1, round(prefilling)))
        dec = run(decode, output_len=output_len, batch=max(1, round(decoding)), concurrency=None)
        first_s = (first.ttft_ms if first is not None else dec.tpot_ms) / 1e3
        ttft_s = pre.ttft_ms / 1e3 + handoff_s + first_s
        decode_s = (output_len - 1) * dec.tpot_ms / 1e3
        cycle_s = ttft_s + decode_s
        prefilling = concurrency * pre.ttft_ms / 1e3 / cycle_s
        decoding = concurrency * (decode_s + first_s) / cycle_s
    p_ttft, d_tpot = pre.intervals["ttft_ms"], dec.intervals["tpot_ms"]
    d_first = first.intervals["ttft_ms"] if first is not None else d_tpot
    ttft = Interval(p_ttft.lo + (handoff_s * 1e3) + d_first.lo, p_ttft.hi + handoff_s * 1e3 + d_first.hi)
    cycle = Interval(ttft.lo + (output_len - 1) * d_tpot.lo, ttft.hi + (output_len - 1) * d_tpot.hi)
    tokens = concurrency * output_len / cycle_s
    rate = Interval(concurrency * output_len / (cycle.hi / 1e3) if cycle.bounded else 0.0,
                    concurrency * output_len / (cycle.lo / 1e3) if cycle.lo > 0 else float("inf"))
    how = (f"{prefill.name} prefills about {prefilling:.1f} of the {concurrency} clients at a time, {decode.name} "
           f"decodes about {decoding:.1f}" + (f" and prefills the {tail} prompt tokens its connector leaves it"
                                              if tail else ""))
    return {"ttft_ms": (ttft_s * 1e3, ttft), "tpot_ms": (dec.tpot_ms, d_tpot), "output_tokens_per_s": (tokens, rate)}, how
