"""Build a costable `Deployment` from a device id, counts and a `Precision`, and check it can run.

The deployment carries the device's sourced specs (`backends`), its derate
(`cost_models.derates`, or the device's measured `Calibration` when
``gimletc calibrate`` saved one), its engine (`backends.engines.engine_costs`, as
``gimletc calibrate --engine`` measured it on that device where it did) and
the precision its weights and KV are stored at. Bad shapes and unsupported dtypes are `BadInput` naming the fix.
"""

from __future__ import annotations

from dataclasses import replace

from backends.engines import engine_costs
from backends.registry import backend_of, device
from compiler.ir.block_graph import BlockGraph
from compiler.ir.calibration import Profile, cached_profile, load_calibration, load_engine_record
from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision
from typing import Any, Callable, Mapping

from cost_models import engines
from cost_models.derates import Derate
from cost_models.serving import Buckets, Deployment, devices_to_hold


def deployment(device_id: str, count: int, tp: int, pp: int, precision: Precision, engine: str = "generic",
               adjust: Callable[[Derate], Derate] | None = None, kv_heads: int | None = None,
               buckets: Buckets | None = None, calibration: str | None = None) -> Deployment:
    """`count` devices of `device_id` as replicas of a `tp` x `pp` group, weights and KV at `precision`,
    served by `engine` (`cost_models.engines`); `adjust` changes the family's derate (sensitivity analysis);
    `kv_heads` (`kv_heads_of`) lets tp above it replicate KV heads ([Note: replicated KV heads]).

    `calibration`: a profile (name or file, ``gimletc calibrate --from``) whose entry for this device and engine,
    where it has one, replaces the shipped engine costs and kernel efficiencies (and bounds the predictions'
    intervals); else the engine as ``calibrate --engine`` measured it on this device, where it did.

    On a platform that runs static shapes (Neuron, `runs_static_shapes`), steps are padded to `buckets` and a
    prompt runs whole ([Note: buckets]); other platforms pad to none."""
    spec = device(device_id)
    if count < 1 or tp < 1 or pp < 1:
        raise BadInput(f"count, tp and pp must be at least 1 (got count={count}, tp={tp}, pp={pp})")
    if count % (tp * pp):
        raise BadInput(f"--count {count} is not a multiple of tp*pp = {tp * pp}; use a count of whole replicas")
    reasons = backend_of(spec).unsupported_reasons(spec, precision.weights)
    if reasons:
        raise BadInput(f"{device_id} cannot run {precision.weights}. Reasons: {'; '.join(reasons)}")
    host = load_calibration(spec.id)
    entry = profile(calibration).entry(spec.id, engine) if calibration else None
    try:  # as the profile or `gimletc calibrate --engine` measured it on this device ([Note: engine records])
        base = engine_costs(engine)
        if entry is not None:
            served_by = engines.calibrated_engine(base, entry.to_json(), spec, host,
                                                  refresh=f"gimletc calibrate --from ... --name {calibration}")
        else:
            served_by = engines.calibrated_engine(base, load_engine_record(spec.id, engine), spec, host) or base
            if engine == "generic" and host is not None and host.spreads and served_by.calibrated_on is None:
                # the reference runtime on a calibrated host: bounded by the calibration's held-out steps
                served_by = replace(served_by, calibrated_on=spec.id, spreads=host.spreads)
    except (ValueError, BadInput) as e:
        raise BadInput(f"engine: {e}") from None
    derate = engines.served_derate(spec.family, host, served_by, spec.id)
    derate = adjust(derate) if adjust is not None else derate
    buckets = buckets if runs_static_shapes(device_id) else None
    if buckets is not None:
        served_by = replace(served_by, prefill_budget_tokens=max(served_by.prefill_budget_tokens, buckets.budget))
    return Deployment(spec, count, derate, tp, pp, precision, served_by, kv_heads, buckets)


def profile(ref: str) -> Profile:
    """The calibration profile `ref` (a name or a file), read once per version of its file. Raises `BadInput`."""
    try:
        return cached_profile(ref)
    except ValueError as e:
        raise BadInput(str(e)) from None


def runs_static_shapes(device_id: str) -> bool:
    """Whether `device_id`'s engine runs programs compiled per bucket of lengths ([Note: buckets])."""
    return any(p.static_shapes for p in backend_of(device(device_id)).engines[:1])


def kv_heads_of(config: Mapping[str, Any]) -> int | None:
    """A Hugging Face config's KV heads (its attention heads where it has no GQA; None for a callable's empty one)."""
    return config.get("num_key_value_heads") or config.get("num_attention_heads") or None


def devices_needed(graph: BlockGraph, dep: Deployment, *, resident: bool = False) -> int:
    """Smallest tp*pp group whose memory (`resident`: fastest tier alone) holds the weights with room for a
    sequence of KV."""
    return devices_to_hold(graph.weight_bytes(dep.precision) * 1.02, dep.device, resident=resident)


#: Widest tensor-parallel group tried (all-reduce cost grows past it; the usual 8-GPU server).
MAX_TP = 8


def group_shape(device_id: str, devices: int) -> tuple[int, int]:
    """(tp, pp) of a replica of at least `devices` devices: tensor parallel (a power of two) inside one
    scale-up domain, pipeline stages beyond it; all pipeline where there is no scale-up fabric (wafer-scale
    systems talk over Ethernet)."""
    up = device(device_id).scale_up
    domain = up.domain_devices if up is not None else 1
    tp = 1
    while tp * 2 <= min(domain, devices, MAX_TP):
        tp *= 2
    return tp, -(-devices // tp)
