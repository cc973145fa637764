"""Write a replan's next plan directory (``gimletc replan --out DIR2``).

Before: a `Replan` (`compiler.replan.replan`), whose ``workload.yaml`` is already in ``DIR2``. After, under
``DIR2``, what ``gimletc compile`` writes for a plan (``plan.json``, stage programs and, for models small
enough, weights and ``model/``; no ONNX) and its Kubernetes manifests (``k8s/``, the engines target), with
``report/inputs.json`` naming ``DIR2/workload.yaml`` (so the next replan of ``DIR2`` starts from it) and
``report/replan.json``: the measurements, the factors, the forecast and the decision, as ``--json`` prints them.
The plan's numbers are predictions of the corrected cost model (`compiler.replan.correct`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from compiler.compile_inputs import INPUTS_FILE, REPORT_DIR, CompileInputs
from compiler.ir.files import atomic_write_text

#: What a replan writes into its output directory (cleared first, as compile clears its own).
OUTPUTS = ("plan.json", "k8s", "stages", "weights", "onnx", "model", "manifest.json", "report")
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
    return ["plan.json", "workload.yaml", *(str(p.relative_to(out)) for p in paths),
            f"{REPORT_DIR}/{INPUTS_FILE}", f"{REPORT_DIR}/{REPLAN_FILE}"]
