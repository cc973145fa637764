"""Build a costable `Deployment` from a served device type, counts and a `Precision`, and check it can run.

The deployment carries the device's sourced specs, its derate
(`cost_models.derates`, or the device's measured `Calibration` when
``gimletc calibrate`` saved one), its engine (as ``gimletc calibrate --engine``
or a profile measured it on that device where they did) and the precision its
weights and KV are stored at: each resolved once, at the boundary
(`compiler.inputs.served`); nothing here reads a registry or a file. Bad
shapes and unsupported dtypes are `BadInput` naming the fix.
"""

from __future__ import annotations

from dataclasses import replace

from compiler.inputs.served import ServedDevice
from compiler.ir.block_graph import BlockGraph
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision
from typing import Any, Callable, Mapping

from cost_models import engines
from cost_models.derates import Derate
from cost_models.buckets import Buckets
from cost_models.serving import Deployment, devices_to_hold


def deployment(served: ServedDevice, count: int, tp: int, pp: int, precision: Precision,
               adjust: Callable[[Derate], Derate] | None = None, kv_heads: int | None = None,
               buckets: Buckets | None = None) -> Deployment:
    """`count` devices of `served` (a device type under its engine, `compiler.inputs.served`) as replicas of a
    `tp` x `pp` group, weights and KV at `precision`; `adjust` changes the family's derate (sensitivity
    analysis); `kv_heads` (`kv_heads_of`) lets tp above it replicate KV heads ([Note: replicated KV heads]).

    On a platform that runs static shapes (Neuron), steps are padded to `buckets` and a prompt runs whole
    ([Note: buckets]); other platforms pad to none."""
    spec = served.spec
    if count < 1 or tp < 1 or pp < 1:
        raise BadInput(f"count, tp and pp must be at least 1 (got count={count}, tp={tp}, pp={pp})")
    if count % (tp * pp):
        raise BadInput(f"--count {count} is not a multiple of tp*pp = {tp * pp}; use a count of whole replicas")
    reasons = served.unsupported_reasons(precision.weights)
    if reasons:
        raise BadInput(f"{spec.id} cannot run {precision.weights}. Reasons: {'; '.join(reasons)}")
    served_by = served.engine
    derate = engines.served_derate(spec.family, served.calibration, served_by, spec.id)
    derate = adjust(derate) if adjust is not None else derate
    buckets = buckets if served.static_shapes else None
    if buckets is not None:
        served_by = replace(served_by, prefill_budget_tokens=max(served_by.prefill_budget_tokens, buckets.budget))
    return Deployment(spec, count, derate, tp, pp, precision, served_by, kv_heads, buckets)


def kv_heads_of(config: Mapping[str, Any]) -> int | None:
    """A Hugging Face config's KV heads (its attention heads where it has no GQA; None for a callable's empty one)."""
    return config.get("num_key_value_heads") or config.get("num_attention_heads") or None


def devices_needed(graph: BlockGraph, dep: Deployment, *, resident: bool = False) -> int:
    """Smallest tp*pp group whose memory (`resident`: fastest tier alone) holds the weights with room for a
    sequence of KV."""
    return devices_to_hold(graph.weight_bytes(dep.precision) * 1.02, dep.device, resident=resident)


#: Widest tensor-parallel group tried (all-reduce cost grows past it; the usual 8-GPU server).
MAX_TP = 8


def group_shape(spec: DeviceSpec, devices: int) -> tuple[int, int]:
    """(tp, pp) of a replica of at least `devices` devices of `spec`: tensor parallel (a power of two) inside one
    scale-up domain, pipeline stages beyond it; all pipeline where there is no scale-up fabric (wafer-scale
    systems talk over Ethernet)."""
    up = spec.scale_up
    domain = up.domain_devices if up is not None else 1
    tp = 1
    while tp * 2 <= min(domain, devices, MAX_TP):
        tp *= 2
    return tp, -(-devices // tp)
