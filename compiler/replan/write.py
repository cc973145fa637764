"""Write a replan's next plan directory (``gimletc replan --out DIR2``).

Before: a `Replan` (`compiler.replan.replan`), whose ``workload.yaml`` is already in ``DIR2``. After, under
``DIR2``, what ``gimletc compile`` writes for a plan (``plan.json``, stage programs and, for models small
enough, weights and ``model/``; no ONNX) and its Kubernetes manifests (``k8s/``, the engines target), with
``report/inputs.json`` naming ``DIR2/workload.yaml`` (so the next replan of ``DIR2`` starts from it) and
``report/replan.json``: the measurements, the factors, the forecast and the decision, as ``--json`` prints them;
and ``autoscale/``: the scaling rules the orchestrator runs until the next replan (`compiler.emit.k8s.autoscale`):
``autoscale/keda/`` a KEDA ScaledObject per engine pool (``kubectl apply -k DIR2/autoscale/keda``, KEDA
installed) and ``autoscale/dynamo-planner.json``, the Dynamo planner's ``--config``, where the plan's pools map
to its components.
The plan's numbers are predictions of the corrected cost model (`compiler.replan.correct`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from compiler.compile_inputs import INPUTS_FILE, REPORT_DIR, CompileInputs
from compiler.ir.files import atomic_write_text

#: What a replan writes into its output directory (cleared first, as compile clears its own).
OUTPUTS = ("plan.json", "k8s", "stages", "weights", "onnx", "model", "manifest.json", "report", "autoscale")
PLANNER_FILE = "dynamo-planner.json"
REPLAN_FILE = "replan.json"


def summary_json(r) -> str:
    """``report/replan.json`` and ``--json``: sorted keys, so the same inputs give the same bytes."""
    return json.dumps(r.summary(), indent=1, sort_keys=True) + "\n"


def write_replan_dir(r, inputs: CompileInputs, out: str | Path) -> list[str]:
    """Write the next plan of `r` (the proposal when it acts, else the running placement re-routed) under `out`;
    returns the paths written, relative to `out`."""
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.k8s import manifests, write_manifests

    out = Path(out)
    final = write_plan_dir(r.plan, inputs.model, out, Options(onnx=False))
    prep = r.prepared
    paths = write_manifests(manifests(final, prep.cluster, target="engines", workload=prep.workload), out / "k8s")
    nxt = dataclasses.replace(inputs, workload=str((out / "workload.yaml").resolve()))
    atomic_write_text(out / REPORT_DIR / INPUTS_FILE, nxt.to_json())
    atomic_write_text(out / REPORT_DIR / REPLAN_FILE, summary_json(r))
    keda, _ranges, planner, _why = autoscalers(r, final)
    extra = []
    if keda:
        extra += [str(p.relative_to(out)) for p in write_manifests(keda, out / "autoscale" / "keda")]
    if planner is not None:
        atomic_write_text(out / "autoscale" / PLANNER_FILE, json.dumps(planner, indent=1, sort_keys=True) + "\n")
        extra.append(f"autoscale/{PLANNER_FILE}")
    return ["plan.json", "workload.yaml", *(str(p.relative_to(out)) for p in paths),
            f"{REPORT_DIR}/{INPUTS_FILE}", f"{REPORT_DIR}/{REPLAN_FILE}", *extra]


def pool_rates(plan, options) -> tuple[dict[str, float], dict[str, float]]:
    """Per pool of `plan`: one replica's provisioned watts and its requests/s at full load for the pool's class
    mix (the harmonic mean of its option's service rates, weighted by the requests routed there; unrouted: all
    the option's classes alike)."""
    from compiler.place.moves import base_key

    by_key = {o.key: o for o in options}
    by_shape: dict = {}
    for o in sorted(options, key=lambda o: (-len(o.classes), o.key)):  # the shape's option serving most classes
        by_shape.setdefault(base_key(o.key), o)
    watts, rates = {}, {}
    for p in plan.pools:  # a running pool's class-split option may be the solve's own copy, not the instance's
        o = by_key.get(p.option) or by_shape[base_key(p.option)]
        watts[p.name] = o.provisioned_w
        mix = {c.name: c.requests_per_s for c in p.predicted_classes if c.requests_per_s > 0 and o.service(c.name)}
        if not mix:
            mix = {s.name: 1.0 for s in o.classes}
        total = sum(mix.values())
        rates[p.name] = total / sum(r / o.service(c).rate_per_s for c, r in mix.items())
    return watts, rates


def autoscalers(r, plan=None):
    """(KEDA objects, their ranges, the Dynamo planner's config or None, why none) for the next plan of `r`."""
    from compiler.emit.k8s.autoscale import dynamo_planner, scaled_objects

    plan = plan or r.plan
    watts, rates = pool_rates(plan, r.instance.options)
    keda, ranges = scaled_objects(plan, r.prepared.cluster, watts, rates)
    planner, why = dynamo_planner(plan, watts, adjustment_interval_s=int(r.observation.seconds))
    return keda, ranges, planner, why
