"""Calibrate an accelerator by measuring it: ``gimletc calibrate --device ID`` on a host that has the device.

Contract: `calibrate_device` measures the device through torch's device API (``torch.accelerator``: the CUDA and
ROCm builds, and any other backend torch exposes under the device's ``torch_device``), fits its efficiencies
against its datasheet peaks (the catalog's: a GPU's peaks are published, unlike a CPU's), saves a `Calibration`
(`compiler.ir.calibration.save_calibration`) that every later estimate on that device id reads, and returns the
report. It refuses a device torch does not see here, naming where to run it.

Measured ([Note: device calibration]):

1. matmuls at the model's own linear shapes (each decoder layer's projections, from its BlockGraph) at 1 to 4,096
   tokens, in the model's dtype;
2. attention (``scaled_dot_product_attention``): one query over 512 to 8,192 cached tokens (decode), and causal
   prompts of 512 and 2,048 tokens (prefill);
3. a copy of 1 GiB within device memory (bandwidth);
4. an all-reduce of 64 MiB over every visible device, where there are several (``torch.distributed``);
5. decode steps of the model itself with random weights (`compiler.trace.export.build_model`) at batch 1 to 64
   over a 1,024-token cache.

[Note: device calibration] The kernels' efficiencies are shares of the datasheet: ``compute_eff`` the best
matmul rate over the dtype's peak, ``mem_eff`` the copy's bytes moved over the memory's peak bandwidth. The
decode steps then pin what a step costs beyond its kernels, on the model's own graph (`cost_models.serving.
decode_step` at those efficiencies): a time per call its blocks make (eager PyTorch launches every op: a tiny
op's measured time, as the host calibration's dispatch) and a time per step, the median of what is left on every
other batch; the others are held out and
their errors are the intervals of later predictions on this device under the generic engine (a serving engine's
own overheads replace these, [Note: one efficiency per device] in cost_models/derates.py). Every figure is
reported measured beside predicted.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from compiler.ir.errors import BadInput

Note = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Settings:
    tokens: tuple[int, ...] = (1, 8, 64, 512, 4096)  # matmul rows (tokens in a step)
    decode_contexts: tuple[int, ...] = (512, 2048, 8192)
    prefill_lengths: tuple[int, ...] = (512, 2048)
    copy_mib: int = 1024
    allreduce_mib: int = 64
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    decode_context: int = 1024
    repeats: int = 10


FULL = Settings()
#: Shapes a CPU runs in seconds: what the tests exercise the same code with.
TINY = Settings(tokens=(1, 16), decode_contexts=(64,), prefill_lengths=(64,), copy_mib=16, allreduce_mib=1,
                decode_batches=(1, 2, 4, 8), decode_context=32, repeats=9)


def accelerator(torch_device: str | None):
    """torch's device module for `torch_device` where torch sees one here, else None."""
    import torch

    if torch_device in (None, "cpu"):
        return None
    module = getattr(torch, torch_device, None)
    available = getattr(module, "is_available", None)
    return module if callable(available) and available() else None


def timed(fn: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    """The median seconds of one call of `fn`, after a warm-up call, with the device synchronised around each."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def linear_shapes(config: dict) -> list[tuple[str, int, int]]:
    """(name, K, N) of one decoder layer's matmuls, x[T, K] @ w[N, K]^T, from a Hugging Face config: the
    attention projections and the MLP's (an expert's, for a MoE).

    >>> linear_shapes({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    ...                "intermediate_size": 14336})[:2]
    [('q_proj', 4096, 4096), ('kv_proj', 4096, 1024)]
    """
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    ffn = int(config.get("moe_intermediate_size") or config.get("intermediate_size") or 4 * hidden)
    return [("q_proj", hidden, heads * head_dim), ("kv_proj", hidden, kv_heads * head_dim),
            ("o_proj", heads * head_dim, hidden), ("gate_up_proj", hidden, 2 * ffn), ("down_proj", ffn, hidden)]


def measure(torch_device: str, model: str, settings: Settings, note: Note) -> dict[str, Any]:
    """Time the microbenchmarks and the model's decode steps on `torch_device` (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from compiler.inputs.model_spec import resolve_model
    from compiler.ir.precision import TORCH_DTYPES

    dev = torch.device(torch_device)
    module = getattr(torch, torch_device, None)
    sync = getattr(module, "synchronize", None) or (lambda: None)
    config = resolve_model(model).config
    dtype = getattr(torch, TORCH_DTYPES["bf16"])
    torch.manual_seed(0)
    rows: dict[str, list[dict[str, Any]]] = {"linear": [], "attention": [], "memory": [], "allreduce": [],
                                             "dispatch": []}
    hidden = int(config["hidden_size"])
    shapes = linear_shapes(config)
    note(f"timing {len(shapes)} matmul shapes of {model} at {len(settings.tokens)} token counts")
    for name, k, n in shapes:
        w = torch.randn(n, k, dtype=dtype, device=dev)
        for t in settings.tokens:
            x = torch.randn(t, k, dtype=dtype, device=dev)
            s = timed(lambda x=x, w=w: F.linear(x, w), sync, settings.repeats)
            rows["linear"].append({"op": name, "tokens": t, "k": k, "n": n, "time_s": s, "flops": 2.0 * t * k * n,
                                   "bytes": 2.0 * (t * k + n * k + t * n)})
    heads = int(config.get("num_attention_heads", 8))
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or hidden // heads)
    for length in settings.decode_contexts:
        q = torch.randn(1, heads, 1, head_dim, dtype=dtype, device=dev)
        kv = torch.randn(1, heads, length, head_dim, dtype=dtype, device=dev)
        s = timed(lambda q=q, kv=kv: F.scaled_dot_product_attention(q, kv, kv), sync, settings.repeats)
        rows["attention"].append({"op": "decode", "context": length, "time_s": s,
                                  "flops": 4.0 * heads * length * head_dim,
                                  "bytes": 2.0 * 2 * kv_heads * length * head_dim})
    for length in settings.prefill_lengths:
        q = torch.randn(1, heads, length, head_dim, dtype=dtype, device=dev)
        s = timed(lambda q=q: F.scaled_dot_product_attention(q, q, q, is_causal=True), sync, settings.repeats)
        rows["attention"].append({"op": "prefill", "context": length, "time_s": s,
                                  "flops": 2.0 * heads * length * length * head_dim,
                                  "bytes": 2.0 * 4 * heads * length * head_dim})
    tiny = torch.ones(8, device=dev)
    calls = 100
    s = timed(lambda: [tiny.add(1.0) for _ in range(calls)], sync, settings.repeats)
    rows["dispatch"] = [{"op": "add of 8 elements", "calls": calls, "time_s": s / calls}]
    src = torch.empty(settings.copy_mib * 2**20 // 2, dtype=dtype, device=dev)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src), sync, settings.repeats)
    rows["memory"].append({"op": "copy", "bytes": 2.0 * src.numel() * 2, "time_s": s})
    visible = module.device_count() if hasattr(module, "device_count") else 1
    if visible > 1:
        rows["allreduce"].append(_allreduce(torch_device, visible, settings.allreduce_mib))
    note(f"timing {model}'s decode steps (random weights) at batch {', '.join(map(str, settings.decode_batches))}")
    rows["decode"] = _decode_steps(model, torch_device, settings, sync)
    return {"rows": rows, "visible_devices": visible, "device_name": _device_name(module), "torch": torch.__version__}


def _device_name(module) -> str:
    try:
        return str(module.get_device_name(0))
    except Exception:  # noqa: BLE001 (a backend without names: say so, do not fail)
        return "unnamed"


def _decode_steps(model: str, torch_device: str, settings: Settings, sync) -> list[dict[str, Any]]:
    """Seconds of one decode step of `model` (random weights, eager) at each batch, over a cache of
    ``decode_context`` tokens: the median over ``repeats`` rounds, each round stepping every batch once, so that
    what else the host runs meanwhile (a shared CPU, a GPU's clocks) weighs on the fitted and the held-out batches
    alike."""
    import torch
    from transformers import DynamicCache

    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import build_model

    built, _ = build_model(resolve_model(model), device=torch_device, dtype="bf16", seed=0)
    vocab = built.config.vocab_size
    with torch.no_grad():
        steps = []
        for b in settings.decode_batches:
            prompt = torch.randint(0, vocab, (b, settings.decode_context), device=torch_device)
            cache = built(input_ids=prompt, use_cache=True, cache=DynamicCache()).cache
            token = torch.randint(0, vocab, (b, 1), device=torch_device)
            steps.append(lambda token=token, cache=cache: built(input_ids=token, use_cache=True, cache=cache))
        times: list[list[float]] = [[] for _ in steps]
        for step in steps:  # warm-up
            step()
        sync()
        for _ in range(settings.repeats):
            for step, ts in zip(steps, times, strict=True):
                start = time.perf_counter()
                step()
                sync()
                ts.append(time.perf_counter() - start)
    del built, steps
    return [{"batch": b, "context": settings.decode_context + 1 + settings.repeats // 2,
             "time_s": statistics.median(ts), "held_out": i % 2 == 1}
            for i, (b, ts) in enumerate(zip(settings.decode_batches, times, strict=True))]


def _allreduce(torch_device: str, devices: int, mib: int) -> dict[str, Any]:
    """A `mib` MiB all-reduce over `devices` local devices, one process each (torch.distributed, the vendor's
    collective library)."""
    import os
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result = mp.get_context("spawn").Queue()
    mp.spawn(_allreduce_worker, args=(devices, torch_device, mib, result), nprocs=devices, join=True)
    seconds = result.get(timeout=60)
    return {"op": "allreduce", "devices": devices, "bytes": float(mib * 2**20), "time_s": seconds}


def _allreduce_worker(rank: int, devices: int, torch_device: str, mib: int, result) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch_device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=devices)
    try:
        getattr(torch, torch_device).set_device(rank)
        x = torch.ones(mib * 2**20 // 2, dtype=torch.bfloat16, device=f"{torch_device}:{rank}")
        sync = getattr(torch, torch_device).synchronize
        seconds = timed(lambda: dist.all_reduce(x), sync, 10)
        if rank == 0:
            result.put(seconds)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- the fit


def fit(device_id: str, model: str, measured: dict[str, Any]) -> dict[str, Any]:
    """The derate the measurements pin down, and every figure measured beside predicted; see
    [Note: device calibration]."""
    from backends.registry import device
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph, stored_precision
    from compiler.ir.precision import Precision
    from cost_models.comm import allreduce_s
    from cost_models.derates import derate_for
    from cost_models.steps import decode_step

    spec = device(device_id)
    peak = spec.peak("bf16") or max(v for _k, v in spec.peak_flops_per_s)
    bw = spec.memory[0].bw_bytes_per_s
    rows = measured["rows"]
    compute_eff = min(1.0, max(r["flops"] / r["time_s"] for r in rows["linear"]) / peak)
    mem_eff = min(1.0, max(r["bytes"] / r["time_s"] for r in rows["memory"]) / bw)
    base = replace(derate_for(spec.family), compute_eff=compute_eff, mem_eff=mem_eff, fp8_compute_eff=None,
                   step_overhead_s=0.0, block_overhead_s=0.0, op_overhead_s=0.0)
    graph = block_graph(model)
    dep = deployment(served(device_id), 1, 1, 1, stored_precision(model, Precision.of("bf16")),
                     adjust=lambda _d: base)
    dispatches = sum(n * (b.dispatches or sum(op.count for op in b.ops))
                     for b, n in _groups(graph))
    op_s = rows["dispatch"][0]["time_s"]  # eager PyTorch launches every call: a tiny op's time is a call's floor
    left = [r["time_s"] - decode_step(graph, dep, r["batch"], r["context"]).time_s - op_s * dispatches
            for r in rows["decode"] if not r["held_out"]]
    derate = replace(base, step_overhead_s=max(0.0, statistics.median(left)), op_overhead_s=op_s)
    fitted = deployment(served(device_id), 1, 1, 1, stored_precision(model, Precision.of("bf16")),
                        adjust=lambda _d: derate)
    decode = [{**r, "predicted_s": decode_step(graph, fitted, r["batch"], r["context"]).time_s} for r in rows["decode"]]
    linear = [{**r, "predicted_s": max(r["flops"] / (peak * compute_eff), r["bytes"] / (bw * mem_eff))}
              for r in rows["linear"]]
    attention = [{**r, "predicted_s": max(r["flops"] / (peak * compute_eff), r["bytes"] / (bw * mem_eff))}
                 for r in rows["attention"]]
    link = spec.scale_up or spec.scale_out
    allreduce = [{**r, "predicted_s": allreduce_s(r["bytes"], r["devices"], bw_bytes_per_s=link.bw_bytes_per_s
                                                  * derate.link_eff, latency_s=link.latency_s)}
                 for r in rows["allreduce"]] if link is not None else []
    return {"derate": {k: getattr(derate, k) for k in ("compute_eff", "mem_eff", "step_overhead_s",
                                                        "op_overhead_s", "block_overhead_s")},
            "peak_flops_per_s": dict(spec.peak_flops_per_s), "mem_bw_bytes_per_s": bw,
            "linear": linear, "attention": attention, "memory": rows["memory"], "allreduce": allreduce,
            "dispatch": rows["dispatch"], "decode": decode, "dispatches_per_step": dispatches}


def _groups(graph):
    from cost_models.serving import block_groups

    return block_groups(graph, "decode")


def decode_spreads(decode: list[dict[str, Any]], basis: str) -> dict:
    """The held-out decode steps' 80% spread: bounds TPOT and the whole request on this device (generic engine)."""
    from compiler.ir.prediction import Spread

    logs = [math.log(r["time_s"] / r["predicted_s"]) for r in decode if r["held_out"]]
    s = Spread.from_log_residuals(logs, basis)
    return {"tpot": s, "e2e": s}


def calibrate_device(device_id: str, model: str = "llama-3.1-8b", progress: Note | None = None,
                     settings: Settings = FULL) -> dict[str, Any]:
    """Measure `device_id` here, fit, save its calibration; returns the report. `BadInput` where torch does not see
    the device on this host."""
    from backends.registry import device
    from compiler.calibrate.host import host_name
    from compiler.ir.calibration import Calibration, save_calibration
    from compiler.ir.files import calibration_path

    spec = device(device_id)
    note = progress or (lambda _m: None)
    if accelerator(spec.torch_device) is None:
        raise BadInput(f"calibrate --device {device_id}: torch sees no {spec.torch_device or 'device it can drive'} "
                       f"here (a {spec.product} is measured on a host that has one, with a torch build for it); on "
                       "this host, calibrate the cost model from benchmark results instead: `gimletc calibrate --from "
                       "RESULT.json ...`")
    measured = measure(spec.torch_device, model, settings, note)
    report = fit(device_id, model, measured)
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    basis = (f"measured: {sum(r['held_out'] for r in report['decode'])} held-out decode steps of {model} by "
             f"`gimletc calibrate --device {device_id}` on {host_name()} at {when} (eager PyTorch, random weights)")
    spreads = decode_spreads(report["decode"], basis)
    report.update(device=device_id, family=spec.family, host=host_name(), measured_at=when, model=model,
                  device_name=measured["device_name"], visible_devices=measured["visible_devices"],
                  torch=measured["torch"], spreads={m: s.to_json() for m, s in spreads.items()},
                  saved_to=str(calibration_path(device_id)))
    try:
        save_calibration(Calibration.from_json(report), report)
    except OSError as e:
        raise BadInput(f"calibrate: cannot write {report['saved_to']} ({e}); set GIMLETC_CACHE_DIR to a writable "
                       "folder") from None
    return report
