"""Cerebras CS-3 (one WSE-3 wafer per system). Numbers from ../shared/reference/hardware_facts.yaml, sources inline.

One device is one CS-3 system (``form="system"``). Inference keeps the weights
and KV in the 44 GB of on-wafer SRAM: a 70B model at 16 bits runs across four
systems, one pipeline stage each (SERVING). MemoryX, external DRAM/flash reached
through the system's Ethernet I/O at roughly 10^5 times below SRAM bandwidth,
streams weights for training; it is listed as a tier that does not serve. Cerebras
publishes only a sparse "125 PF peak AI" figure, so the dense rates are a
labelled assumption, and the ~23 kW power is low-confidence. There is no
NVLink-like scale-up between wafers: systems talk over SwarmX/Ethernet.
Cerebras runs as an appliance, so there is no Kubernetes resource and stages
run emulated on the host.
"""

from __future__ import annotations

from backends.base import Backend, on_node
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

CS3_LAUNCH = ("https://www.tomshardware.com/tech-industry/artificial-intelligence/cerebras-launches-900000-core-"
              "125-petaflops-wafer-scale-processor-for-ai-theoretically-equivalent-to-about-62-nvidia-h100-gpus")
ARGONNE = "https://argonne-lcf.github.io/user-guides/ai-testbed/cerebras"
CLUSTER_DOCS = "https://training-docs.cerebras.ai/rel-2.10.0/concepts/cerebras-wafer-scale-cluster"

DENSE = ("assumption: Cerebras publishes no dense rate; half of the 125 PF 'peak AI' figure (FP16 with sparsity, "
         + CS3_LAUNCH + "), the 2x that sparse headlines carry elsewhere")
# The WSE-2's CS-2 has 12x100 GbE = 1.2 Tb/s of I/O; hardware_facts.yaml estimates ~1.5 Tb/s for CS-3 (+30%).
SYSTEM_IO = ("assumption: the CS-2's published 1.2 Tb/s (12x100 GbE) system I/O, " + ARGONNE
             + "; CS-3 may have ~30% more (hardware_facts.yaml estimate)")
MEMORYX_BW = ("assumption: MemoryX streams weights through the system I/O, so 1.2 Tb/s = 150 GB/s (" + ARGONNE
              + "); MemoryX is sized to match it, https://www.cerebras.net/glossary/memoryx/")
SERVING = ("https://cerebras.ai/blog/introducing-cerebras-inference-ai-at-instant-speed (Llama 3.1 70B at 450 "
           "tokens/s with native 16-bit weights held in on-chip SRAM; 70B models run on four CS-3 systems)")
MEMORYX_CAPACITY = ("assumption: the smallest CS-3 MemoryX option, 1.5 TB (also 12 TB and 1.2 PB; "
                    "hardware_facts.yaml), " + CS3_LAUNCH)


# The CS-3 is itself the deployable unit: its ~23 kW covers the wafer, power supplies, pumps and fans, so its
# wall power per device is its system power ([Note: power footing]).
CS3_WALL = ("assumption: the system is the unit; ~23 kW, the commonly quoted CS-3 system power (" + CS3_LAUNCH
            + "; low confidence, no primary datasheet found), covers wafer, power supplies, pumps and fans; the "
              "CPU servers and SwarmX switches of a Cerebras cluster are not published per system and are left out")


class CerebrasBackend(Backend):
    family = "cerebras"
    # No public engine runs on the wafer: a CS-3 pool is the system's own OpenAI-compatible inference endpoint.
    engines = (EnginePlatform(engine="external", platform="external", version="", image=None, kv_buffer_device=None,
                              source="https://inference-docs.cerebras.ai/api-reference/chat-completions "
                                     "(OpenAI-compatible API of Cerebras inference)"),)
    devices = (
        on_node(DeviceSpec(
            id="cerebras-cs3", vendor="Cerebras", product="CS-3 system (one WSE-3 wafer, 900k cores, 44 GB SRAM)",
            family="cerebras", form="system",
            peak_flops_per_s=(("bf16", 62.5e15), ("fp16", 62.5e15)),
            memory=(MemoryTier("sram", 44e9, 21e15), MemoryTier("external", 1.5e12, 1.2e12 / 8, serves=False)),
            tdp_w=23000, idle_w=2300,
            devices_per_node=1,
            scale_up=None,
            scale_out=Link("SwarmX / Ethernet (12x100 GbE system I/O)", 1.2e12 / 8, 10e-6, 2048),
            k8s_resource=None,
            k8s_note="no public device plugin; Cerebras runs as an appliance (Cerebras Inference API / SDK)",
            torch_device=None,
            software="Cerebras Software Platform (PyTorch front end, Model Zoo), Cerebras SDK (CSL), Inference API",
            image="",
            sources=tuple(sorted({
                "peak_flops_per_s.bf16": DENSE, "peak_flops_per_s.fp16": DENSE,
                "memory.sram.capacity_bytes": CS3_LAUNCH, "memory.sram.bw_bytes_per_s": CS3_LAUNCH + " (21 PB/s)",
                "memory.external.capacity_bytes": MEMORYX_CAPACITY, "memory.external.bw_bytes_per_s": MEMORYX_BW,
                "memory.external.serves": SERVING + "; MemoryX streams weights for training, not inference",
                "tdp_w": CS3_LAUNCH + " (low confidence: ~23 kW is the commonly quoted figure and Cerebras says "
                                      "CS-3 draws the same power as CS-2; no primary CS-3 datasheet found)",
                "idle_w": "assumption: not published; 10% of system power, the rule used for chips (probably low for "
                          "a system whose pumps and fans run regardless of load)",
                "devices_per_node": CLUSTER_DOCS + " (one wafer per CS-3 system; clusters of up to 2,048 systems)",
                "scale_out.bw_bytes_per_s": SYSTEM_IO,
                "scale_out.latency_s": "assumption: ~10 us per message across SwarmX/Ethernet including software",
            }.items())),
        ), 23000, "assumed", CS3_WALL),
    )


BACKEND = CerebrasBackend()
