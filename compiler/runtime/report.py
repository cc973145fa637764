"""Measured against predicted: per-stage wall time and bytes per transfer kind, next to the plan's numbers.

Measured numbers are this host's (stages whose silicon is absent run
``emulated`` on the host CPU, with the same numerics, so their times say
nothing about the device); predicted numbers are the plan's, for its devices.
KV bytes are predicted exactly: every request hands off ``prompt tokens x
bytes_per_token`` (`compiler.plan.transfers`), so the two columns must agree;
so are draft-token bytes (drafted tokens x 8 bytes x receiving ranks). Units
with a drafter also report their acceptance rate and tokens per verification
next to what the plan's assumed acceptance rate implies.
"""

from __future__ import annotations

from compiler.plan.schema import Plan
from compiler.runtime.speculative import tokens_per_verification


def execution_of(device_id: str) -> str:
    """``native`` only for the host CPU (the runtime computes on the CPU); every other device is emulated."""
    try:
        from backends.registry import device

        spec = device(device_id)
    except Exception:
        return "emulated"
    return "native" if spec.torch_device == "cpu" else "emulated"


def execution_lines(plan: Plan) -> list[str]:
    out = []
    for pool in plan.pools:
        for stage in pool.stages:
            if execution_of(stage.device) == "emulated":
                out.append(f"{pool.name} stage {stage.index} ({pool.role}) targets {stage.device}, absent here: "
                           f"emulated on the host CPU (same numerics, host timings)")
    return out


def run_report(engine, requests) -> dict:
    plan = engine.plan
    stats = engine.worker_stats()
    pools = {p.name: p for p in plan.pools}
    stages = []
    bytes_by_kind: dict[str, int] = {}
    for rank, w in engine.table.items():
        s = stats[rank]
        for kind, n in s["bytes"].items():
            bytes_by_kind[kind] = bytes_by_kind.get(kind, 0) + n
        pool = pools[w.pool]
        stages.append({"stage": w.name, "rank": rank, "role": w.role, "device": w.device,
                       "execution": execution_of(w.device), "compute_s": s["compute_s"], "steps": s["steps"],
                       "predicted_ttft_ms": pool.predicted_ttft_ms, "predicted_tpot_ms": pool.predicted_tpot_ms})
    kv_detail = next((t.detail for t in plan.transfers if t.kind == "kv" and t.detail is not None), None)
    act_detail = next((t.detail for t in plan.transfers if t.kind == "activation" and t.detail is not None), None)
    transfers = [{"kind": "kv_pages", "measured_bytes": bytes_by_kind.get("kv_pages", 0),
                  "predicted_bytes": engine.kv_bytes_predicted if kv_detail else 0,
                  "how": "prompt tokens x plan bytes_per_token" + (f" ({kv_detail.bytes_per_token})" if kv_detail
                                                                   else "")},
                 {"kind": "hidden_states", "measured_bytes": bytes_by_kind.get("hidden_states", 0),
                  "predicted_bytes": None,
                  "how": (f"plan: {act_detail.bytes_per_token} B per token x {act_detail.crossings_per_token} "
                          f"crossings per decode token (x receiving tp ranks)") if act_detail else "no such edge"}]
    draft_detail = next((t.detail for t in plan.transfers if t.kind == "draft" and t.detail is not None), None)
    if draft_detail is not None:
        transfers.append({"kind": "draft_tokens", "measured_bytes": bytes_by_kind.get("draft_tokens", 0),
                          "predicted_bytes": engine.draft_bytes_predicted,
                          "how": f"drafted tokens x plan bytes_per_token ({draft_detail.bytes_per_token}) x "
                                 f"receiving ranks"})
    if "pipeline_hidden_states" in bytes_by_kind:
        transfers.append({"kind": "pipeline_hidden_states", "measured_bytes": bytes_by_kind["pipeline_hidden_states"],
                          "predicted_bytes": None, "how": "between pipeline stages of one pool"})
    starts = [r.arrived_s for r in requests]
    ends = [r.done_s for r in requests if r.done_s is not None]
    wall = (max(ends) - min(starts)) if ends else 0.0
    tokens = sum(len(r.tokens) for r in requests)
    return {
        "execution": execution_lines(plan),
        "requests": [{"id": r.id, "prompt_tokens": len(r.prompt), "tokens": r.tokens, "finish_reason": r.finish_reason,
                      "ttft_ms": ((r.first_token_s or r.arrived_s) - r.arrived_s) * 1e3,
                      "unit": r.unit} for r in requests],
        "stages": stages, "transfers": transfers, "speculative": speculative_report(engine),
        "measured": {"wall_s": wall, "output_tokens": tokens, "output_tokens_per_s": tokens / wall if wall else 0.0,
                     "where": "this host"},
        "predicted": plan.predicted.model_dump(mode="json"),
    }


def speculative_report(engine) -> list[dict]:
    """Per unit with a drafter: measured acceptance and tokens per verification next to the plan's assumed
    acceptance rate and the tokens per verification it implies (a prediction; None when the plan assumes none)."""
    out = []
    for unit in engine.units:
        if unit.draft is None:
            continue
        s, alpha = engine.spec[unit.name], unit.draft.predicted_acceptance_rate
        out.append({"unit": unit.name, "drafter": f"{unit.draft.pool}/r{unit.draft.replica}", "k": s.k,
                    "verifications": s.verifications, "drafted_tokens": s.drafted, "accepted_tokens": s.accepted,
                    "acceptance_rate": s.acceptance_rate, "tokens_per_verification": s.tokens_per_verification,
                    "histogram": {str(a): n for a, n in sorted((s.accepted_histogram or {}).items())},
                    "predicted_acceptance_rate": alpha,
                    "predicted_tokens_per_verification": None if alpha is None
                    else tokens_per_verification(alpha, s.k)})
    return out
