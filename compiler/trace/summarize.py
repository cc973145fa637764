"""What ``gimletc inspect`` reports: a BlockGraph evaluated at one shape and dtype.

`summarize` returns the documented JSON object (see docs/cli/inspect.md); the CLI
renders its tables from the same object, so the two never disagree.

Top-level keys: ``model``, ``dtype``, ``dense_dtype``, ``kv_dtype``, ``batch``, ``prompt_len``,
``context_len``, ``layers``, ``params_total``, ``params_active``,
``embed_params``, ``weight_bytes``, ``kv_bytes_per_token``, ``trace``,
``unaccounted`` and one object per traced phase (``prefill``, ``decode``) with
``flops``, ``flops_per_token``, ``bytes`` (moved by one step, split into
``weight_read_bytes``, ``kv_bytes``, ``act_bytes``), ``arithmetic_intensity``,
``roles`` (totals per role) and ``blocks``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from compiler.ir.block_graph import ROLES, ZERO_WORK, BlockGraph, Work
from compiler.ir.precision import Precision


def _work_json(w: Work) -> dict[str, float]:
    return {
        "flops": w.flops, "bytes": w.bytes, "weight_read_bytes": w.weight_bytes, "kv_bytes": w.kv_bytes,
        "act_bytes": w.act_bytes, "arithmetic_intensity": w.flops / w.bytes if w.bytes else 0.0,
    }


def summarize(graph: BlockGraph, *, precision: Precision = Precision.of("bf16"), batch: int = 1,
              prompt_len: int = 1024, context_len: int | None = None,
              phases: tuple[str, ...] = ("prefill", "decode")) -> dict[str, Any]:
    context_len = prompt_len if context_len is None else context_len
    points = {"prefill": {"B": batch, "S": prompt_len}, "decode": {"B": batch, "L": context_len}}
    tokens = {"prefill": batch * prompt_len, "decode": batch}
    out: dict[str, Any] = {
        "model": graph.model, "dtype": precision.weights, "dense_dtype": precision.dense or precision.weights,
        "kv_dtype": precision.kv,
        "batch": batch, "prompt_len": prompt_len, "context_len": context_len, "layers": graph.num_layers,
        "params_total": graph.params_total, "params_active": graph.params_active,
        "embed_params": graph.embed_params,
        "weight_bytes": graph.weight_bytes(precision),
        "kv_bytes_per_token": graph.kv_bytes_per_token(precision),
        "kv_bytes_at_context": graph.kv_bytes_per_sequence(context_len, precision) * batch,
        "trace": dict(graph.trace),
        "unaccounted": [{"phase": u.phase, "block": u.block, "op": u.op, "count": u.count} for u in graph.unaccounted],
    }
    for phase in phases:
        blocks = graph.phase_blocks(phase)
        if not blocks:
            continue
        total, by_role = ZERO_WORK, defaultdict(lambda: ZERO_WORK)
        rows = []
        for b in blocks:
            w = b.work(precision, **points[phase])
            total, by_role[b.role] = total + w, by_role[b.role] + w
            row = {"name": b.name, "role": b.role, "phase": b.phase, "layer": b.layer,
                   "weight_bytes": b.weight_bytes(precision), **_work_json(w)}
            if b.role == "attn":
                row.update(attention=b.attention, kv_bytes_per_token=b.kv_elems_per_token * precision.kv_bytes)
                if b.window_tokens:
                    row["window_tokens"] = b.window_tokens
            if b.role == "moe":
                row.update(experts=b.experts, experts_per_token=b.experts_per_token)
            rows.append(row)
        role_rows = []
        for role in ROLES:
            members = [b for b in blocks if b.role == role]
            if members:
                role_rows.append({"role": role, "blocks": len(members),
                                  "weight_bytes": sum(b.weight_bytes(precision) for b in members),
                                  **_work_json(by_role[role])})
        out[phase] = {**_work_json(total), "flops_per_token": total.flops / tokens[phase],
                      "tokens": tokens[phase], "roles": role_rows, "blocks": rows}
    return out
