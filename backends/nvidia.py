"""NVIDIA data-center GPUs (CUDA). Numbers from ../shared/reference/hardware_facts.yaml, sources inline.

Dense peaks only: NVIDIA's headline tensor numbers for Hopper, Blackwell and
Ada are 2:4-sparse and are halved here (their sources say so); the A100
datasheet lists dense numbers directly. ``fp32`` is plain FP32 (CUDA cores),
not TF32: PyTorch runs fp32 matmuls without TF32 unless a user opts in.
Links are per GPU, one direction (NVLink "900 GB/s" is 450 each way).
"""

from __future__ import annotations

from backends.base import (
    DGX_A100_SOURCE, DGX_A100_W, DGX_H100_SOURCE, DGX_H100_W, Backend, ReferencePrice, hgx_node, on_node, pcie_node,
)
from backends.engines.sglang import SGLANG_DOCKER, SGLANG_RELEASE
from backends.engines.trtllm import TRTLLM_DOCKER, TRTLLM_RELEASE
from backends.engines.vllm import VLLM_DOCKER, VLLM_RELEASE
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

A100_DATASHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                  "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/"
H200_PAGE = "https://www.nvidia.com/en-us/data-center/h200/"
DGX_B200 = "https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet"
B200_NOTES = "https://glennklockwood.com/garden/processors/B200"
HGX_B200_NVLINK = "https://docs.vultr.com/inference-cookbook/cuda/getting-started/hardware-overview"
GB200_PAGE = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
GB200_MLPERF = ("https://raw.githubusercontent.com/mlcommons/inference_results_v6.1/main/closed/Crusoe/systems/"
                "GB200-NVL72_GB200-186GB_aarch64x16_Dynamo.json")
L40S_PAGE = "https://www.nvidia.com/en-us/data-center/l40s/"
L4_PAGE = "https://www.nvidia.com/en-us/data-center/l4/"
A10G_NOTES = "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
A10_PAGE = "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
H20_NEWS = ("https://www.tweaktown.com/news/95224/nvidias-tweaked-h20-ai-gpu-enters-mass-production-in-q2-2024-"
            "destined-for-china/index.html")
H20_DENSE = "https://www.winzheng.com/en/review/deploy-deepseek-r1-on-h20"
H20_FP32 = "https://zangshuxian.com/new/674733024499207168"
AWS_G6 = "https://aws.amazon.com/ec2/instance-types/g6/"
AWS_G5 = "https://aws.amazon.com/ec2/instance-types/g5/"
MELANGE_REPO = "https://github.com/tyler-griggs/melange-release/blob/main/melange/"
GPU_PRICES = "https://khaderz.com/en/ai-engineer-path/production/gpu-cost-modeling"
ACCEL_TABLE = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
NETWORK_TABLE = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"
HALVED = " (2:4-sparse headline halved)"

# [Note: product node labels] NVIDIA GPU Feature Discovery labels each node `nvidia.com/gpu.product` with the
# nvidia-smi product name, characters outside [A-Za-z0-9-_. ] dropped and spaces turned into '-' (`sanitise` in
# https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/resource.go; label table in
# docs/gpu-feature-discovery/README.md). nvidia-smi names: "NVIDIA H100 80GB HBM3" and "NVIDIA A100-SXM4-80GB"
# as printed by nvidia-smi / deviceQuery on HGX systems; the others follow NVIDIA's "NVIDIA <product>" naming
# (assumption: check `kubectl get nodes -L nvidia.com/gpu.product` and override with `node_selector` in the
# cluster file). The DRA driver (NVIDIA/k8s-dra-driver-gpu) publishes DeviceClass gpu.nvidia.com.
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GFD_PRODUCT = {
    "nvidia-a100-sxm-40gb": "NVIDIA-A100-SXM4-40GB", "nvidia-a100-sxm-80gb": "NVIDIA-A100-SXM4-80GB",
    "nvidia-l40s": "NVIDIA-L40S", "nvidia-h100-sxm": "NVIDIA-H100-80GB-HBM3", "nvidia-h200-sxm": "NVIDIA-H200",
    "nvidia-b200": "NVIDIA-B200", "nvidia-gb200": "NVIDIA-GB200", "nvidia-l4": "NVIDIA-L4", "nvidia-a10g": "NVIDIA-A10G",
    "nvidia-h20": "NVIDIA-H20",
}

IDLE = "assumption: NVIDIA publishes no idle power; ~10% of TDP, in line with nvidia-smi idle readings of HGX parts"
NVLINK_LATENCY = "assumption: ~5 us per NVLink collective step (NCCL small-message latency on NVSwitch systems)"
PCIE_LATENCY = "assumption: ~10 us per GPU-to-GPU transfer over PCIe through the host or a PCIe switch, with NCCL"
IB_LATENCY = "assumption: ~10 us per message across InfiniBand/RoCE including software"


def _nvlink(generation: int, bw_bytes_per_s: float, domain_devices: int) -> Link:
    return Link(f"NVLink {generation} + NVSwitch", bw_bytes_per_s, 5e-6, domain_devices)


def _network(gbit_per_s: float) -> Link:
    """InfiniBand/RoCE/EFA at `gbit_per_s` per GPU; any number of nodes."""
    return Link(f"InfiniBand / RoCE / EFA {gbit_per_s:.0f}G per GPU", gbit_per_s * 1e9 / 8, 10e-6, 1 << 16)


def _nvidia(id: str, product: str, tflops: dict[str, float], device_memory: tuple[float, float], tdp_w: float,
            scale_up: Link, scale_out: Link, src: dict[str, str], *, form: str = "chip",
            devices_per_node: int = 8, memory_name: str = "hbm") -> DeviceSpec:
    """One GPU. `tflops` are dense TFLOPS (TOPS for int8); `device_memory` is (bytes, bytes/s).

    `src` gives the sources of this GPU's numbers: ``flops`` (every dtype but
    fp32, which comes from the accelerator table), ``memory``, ``tdp_w``,
    ``devices_per_node``, ``scale_up`` and ``scale_out`` (bandwidths); link
    latencies and idle power are family assumptions unless `src` overrides
    them by their full key.
    """
    capacity_bytes, bw_bytes_per_s = device_memory
    by_dtype = {k: src.get("fp32", ACCEL_TABLE) if k == "fp32" else src["flops"] for k in tflops}
    return DeviceSpec(
        id=id, vendor="NVIDIA", product=product, family="nvidia", form=form,
        peak_flops_per_s=tuple(sorted((k, v * 1e12) for k, v in tflops.items())),
        memory=(MemoryTier(memory_name, capacity_bytes, bw_bytes_per_s),),
        tdp_w=tdp_w, idle_w=round(0.1 * tdp_w),
        devices_per_node=devices_per_node,
        scale_up=scale_up, scale_out=scale_out,
        k8s_resource="nvidia.com/gpu", torch_device="cuda", software="CUDA (TensorRT-LLM, vLLM, SGLang)",
        image="nvcr.io/nvidia/pytorch:25.01-py3",
        k8s_node_labels=((GFD_PRODUCT_LABEL, GFD_PRODUCT[id]),), dra_device_class="gpu.nvidia.com",
        sources=tuple(sorted({
            **{f"peak_flops_per_s.{k}": s for k, s in by_dtype.items()},
            f"memory.{memory_name}.capacity_bytes": src["memory"],
            f"memory.{memory_name}.bw_bytes_per_s": src["memory"],
            "tdp_w": src["tdp_w"], "idle_w": IDLE, "devices_per_node": src["devices_per_node"],
            "scale_up.bw_bytes_per_s": src["scale_up"], "scale_up.latency_s": NVLINK_LATENCY,
            "scale_out.bw_bytes_per_s": src["scale_out"], "scale_out.latency_s": IB_LATENCY,
            **{k: v for k, v in src.items() if "." in k},
        }.items())),
    )


def _a100(id: str, product: str, hbm: tuple[float, float]) -> DeviceSpec:
    # DGX A100: 8 GPUs, NVLink 3 at 600 GB/s both ways, one 200G HDR port per GPU.
    return _nvidia(id, product, {"bf16": 312, "fp16": 312, "int8": 624, "fp32": 19.5}, hbm, 400,
                   _nvlink(3, 300e9, 8), _network(200),
                   {"flops": A100_DATASHEET, "memory": A100_DATASHEET, "tdp_w": A100_DATASHEET,
                    "devices_per_node": NETWORK_TABLE, "scale_up": A100_DATASHEET + " (NVLink 600 GB/s both ways)",
                    "scale_out": NETWORK_TABLE})


HOPPER_TFLOPS = {"bf16": 989, "fp16": 989, "fp8": 1979, "int8": 1979, "fp32": 67}
# GB200 runs its Blackwell GPUs a little faster than HGX B200 (1,200 W vs 1,000 W configurations).
B200_TFLOPS = {"bf16": 2250, "fp16": 2250, "fp8": 4500, "int8": 4500, "fp4": 9000, "fp32": 80}
PCIE4_PEER = "PCIe Gen4 x16 peer-to-peer (no NVLink)"
# The inference parts the published heterogeneity studies used (Mélange: L4, A10G; MegaScale-Infer: H20).
L4_TFLOPS = {"bf16": 121, "fp16": 121, "fp8": 242.5, "int8": 242.5, "fp32": 30.3}
A10G_TFLOPS = {"bf16": 70, "fp16": 70, "fp32": 31.2}
H20_TFLOPS = {"bf16": 148, "fp16": 148, "fp8": 296, "int8": 296, "fp32": 44}
SMALL_NODE_NET = ("assumption: AWS publishes 100 Gb/s for its 8-GPU g5.48xlarge and g6.48xlarge; 12.5 Gb/s per "
                  "GPU, ")
GB200_TFLOPS = {"bf16": 2500, "fp16": 2500, "fp8": 5000, "int8": 5000, "fp4": 10000, "fp32": 80}


# Wall power per GPU of the unit each GPU deploys in ([Note: power footing], [Note: node power shares]).
DGX_B200_W = 14_300  # DGX B200: "~14.3 kW max" for 8 x 1,000 W GPUs
NVL72_W = 120_000
NODE_POWER = {
    "nvidia-a100-sxm-40gb": lambda d: on_node(d, DGX_A100_W / 8, "specified", DGX_A100_SOURCE),
    "nvidia-a100-sxm-80gb": lambda d: on_node(d, DGX_A100_W / 8, "specified", DGX_A100_SOURCE),
    "nvidia-h100-sxm": lambda d: on_node(d, DGX_H100_W / 8, "specified", DGX_H100_SOURCE),
    "nvidia-h200-sxm": lambda d: on_node(d, DGX_H100_W / 8, "specified", DGX_H100_SOURCE),
    "nvidia-b200": lambda d: on_node(d, DGX_B200_W / 8, "specified",
                                     DGX_B200 + " (DGX B200 system power usage ~14.3 kW max, 8 GPUs)"),
    "nvidia-gb200": lambda d: on_node(
        d, NVL72_W / 72, "assumed", "assumption: NVIDIA's product page gives no rack power; ~120 kW per "
        "liquid-cooled NVL72 rack (72 GPUs, 36 Grace CPUs, 9 NVLink switch trays) is the figure commonly "
        "reported, over 72 GPUs (" + GB200_PAGE + ")"),
    "nvidia-h20": hgx_node,  # an HGX H20 server is built like an HGX H100
    "nvidia-l40s": pcie_node, "nvidia-l4": pcie_node, "nvidia-a10g": pcie_node,
}


class NvidiaBackend(Backend):
    family = "nvidia"
    # Public serving engines on CUDA, vLLM first (the engine of a pool whose cluster entry says `generic`).
    engines = (
        EnginePlatform(engine="vllm", platform="cuda", version=VLLM_RELEASE, image=f"vllm/vllm-openai:v{VLLM_RELEASE}",
                       kv_buffer_device="cuda", source=VLLM_DOCKER),
        EnginePlatform(engine="sglang", platform="cuda", version=SGLANG_RELEASE,
                       image=f"lmsysorg/sglang:v{SGLANG_RELEASE}", kv_buffer_device="cuda", source=SGLANG_DOCKER),
        EnginePlatform(engine="trtllm", platform="cuda", version=TRTLLM_RELEASE,
                       image=f"nvcr.io/nvidia/tensorrt-llm/release:{TRTLLM_RELEASE}", kv_buffer_device="cuda",
                       source=TRTLLM_DOCKER),
    )
    devices = tuple(NODE_POWER[d.id](d) for d in (
        _a100("nvidia-a100-sxm-40gb", "A100 SXM4 40GB (Ampere)", (40e9, 1.555e12)),
        _a100("nvidia-a100-sxm-80gb", "A100 SXM4 80GB (Ampere)", (80e9, 2.039e12)),
        _nvidia("nvidia-l40s", "L40S 48GB GDDR6 (Ada Lovelace, PCIe)",
                {"bf16": 362, "fp16": 362, "fp8": 733, "int8": 733, "fp32": 91.6}, (48e9, 0.864e12), 350,
                # No NVLink: GPUs reach each other over PCIe Gen4 x16.
                Link("PCIe Gen4 x16 peer-to-peer (no NVLink)", 31.5e9, 10e-6, 8), _network(200),
                {"flops": L40S_PAGE + HALVED, "memory": L40S_PAGE, "tdp_w": L40S_PAGE,
                 "devices_per_node": "assumption: 8 per PCIe server (hardware_facts: typically 4-8, some 10-12)",
                 "scale_up": NETWORK_TABLE + " (PCIe Gen4 x16: 31.5 GB/s per direction)",
                 "scale_up.latency_s": PCIE_LATENCY,
                 "scale_out": "assumption: deployment-specific (nothing published); 200 Gb/s Ethernet/RoCE per GPU, "
                              "half an HGX server's 400G per GPU since PCIe servers carry fewer NICs"},
                form="card", memory_name="dram"),
        _nvidia("nvidia-h100-sxm", "H100 SXM5 80GB HBM3 (Hopper)", HOPPER_TFLOPS, (80e9, 3.35e12), 700,
                _nvlink(4, 450e9, 8), _network(400),
                {"flops": H100_PAGE + HALVED, "memory": H100_PAGE, "tdp_w": H100_PAGE,
                 "devices_per_node": NETWORK_TABLE, "scale_up": NETWORK_TABLE + " (NVLink 4: 900 GB/s both ways)",
                 "scale_out": NETWORK_TABLE}),
        _nvidia("nvidia-h200-sxm", "H200 SXM 141GB HBM3e (Hopper)", HOPPER_TFLOPS, (141e9, 4.8e12), 700,
                _nvlink(4, 450e9, 8), _network(400),
                {"flops": H200_PAGE + HALVED, "memory": H200_PAGE, "tdp_w": H200_PAGE,
                 "devices_per_node": NETWORK_TABLE, "scale_up": NETWORK_TABLE + " (NVLink 4: 900 GB/s both ways)",
                 "scale_out": NETWORK_TABLE}),
        _nvidia("nvidia-b200", "B200 SXM 180GB HBM3e (HGX/DGX B200, Blackwell, 1,000 W)", B200_TFLOPS,
                (180e9, 8.0e12), 1000, _nvlink(5, 900e9, 8), _network(400),
                {"flops": DGX_B200 + " (per GPU: system figure / 8; 2:4-sparse headline halved)",
                 "memory": DGX_B200 + " (180 GB usable per GPU: 1,440 GB / 8)", "tdp_w": B200_NOTES,
                 "devices_per_node": DGX_B200, "scale_up": HGX_B200_NVLINK, "scale_out": DGX_B200}),
        _nvidia("nvidia-l4", "L4 24GB GDDR6 (Ada Lovelace, PCIe, 72 W)", L4_TFLOPS, (24e9, 300e9), 72,
                Link(PCIE4_PEER, 31.5e9, 10e-6, 8), _network(12.5),
                {"flops": L4_PAGE + HALVED, "fp32": L4_PAGE, "memory": L4_PAGE, "tdp_w": L4_PAGE,
                 "devices_per_node": AWS_G6 + " (g6.48xlarge: 8 L4)",
                 "scale_up": NETWORK_TABLE + " (PCIe Gen4 x16: 31.5 GB/s per direction)",
                 "scale_up.latency_s": PCIE_LATENCY, "scale_out": SMALL_NODE_NET + AWS_G6},
                form="card", memory_name="dram"),
        _nvidia("nvidia-a10g", "A10G 24GB GDDR6 (Ampere, AWS G5 variant of the A10)", A10G_TFLOPS, (24e9, 600e9),
                300, Link(PCIE4_PEER, 31.5e9, 10e-6, 8), _network(12.5),
                {"flops": A10G_NOTES + " (spec table: 70 TFLOPS FP16/BF16 tensor, dense; the A10 has 125)",
                 "fp32": "assumption: the A10's 31.2 TFLOPS FP32 (" + A10_PAGE + "); " + A10G_NOTES +
                         " says the A10G's CUDA-core rate is a little higher",
                 "memory": A10G_NOTES + " (24 GB GDDR6, 600 GB/s, as the A10)",
                 "tdp_w": "assumption: AWS publishes no A10G board power; 300 W as third-party GPU databases list "
                          "it (the A10 it derives from is a 150 W card, " + A10_PAGE + ")",
                 "devices_per_node": AWS_G5 + " (g5.48xlarge: 8 A10G)",
                 "scale_up": NETWORK_TABLE + " (PCIe Gen4 x16: 31.5 GB/s per direction)",
                 "scale_up.latency_s": PCIE_LATENCY, "scale_out": SMALL_NODE_NET + AWS_G5},
                form="card", memory_name="dram"),
        _nvidia("nvidia-h20", "H20 96GB HBM3 (Hopper, export-compliant: full memory, ~15% of H100 compute)",
                H20_TFLOPS, (96e9, 4.0e12), 400, _nvlink(4, 450e9, 8), _network(400),
                {"flops": H20_DENSE + " (Ant Group's table: FP8 296, FP16/BF16 148 TFLOPS, against H800's dense "
                                      "1979/989)",
                 "fp32": H20_FP32 + " (FP32 44 TFLOPS)",
                 "memory": H20_NEWS + " (96 GB HBM3 at 4.0 TB/s)", "tdp_w": H20_NEWS + " (400 W TDP)",
                 "devices_per_node": H20_NEWS + " (8-way HGX)",
                 "scale_up": H20_NEWS + " (NVLink 900 GB/s both ways)",
                 "scale_out": "assumption: HGX H20 servers carry one 400G NIC per GPU, like HGX H100 (" +
                              NETWORK_TABLE + ")"}),
        _nvidia("nvidia-gb200", "GB200 NVL72, one Blackwell GPU (186GB HBM3e, 1,200 W configuration)",
                GB200_TFLOPS, (186e9, 8.0e12), 1200, _nvlink(5, 900e9, 72), _network(400),
                {"flops": GB200_PAGE + " (per GPU: rack figure / 72; 2:4-sparse headline halved)",
                 "memory": GB200_MLPERF + " (186 GB per GPU)",
                 "memory.hbm.bw_bytes_per_s": GB200_PAGE + " (rack HBM bandwidth / 72)",
                 "tdp_w": "assumption: 1,200 W per GPU, the GB200 configuration hardware_facts.yaml records; NVIDIA "
                          "publishes rack-level power, see " + GB200_PAGE,
                 "devices_per_node": GB200_PAGE + " (a compute tray holds 2 superchips = 4 GPUs)",
                 "scale_up": GB200_PAGE + " (NVLink 5: 1.8 TB/s per GPU both ways; 72-GPU domain)",
                 "scale_out": GB200_MLPERF + " (4 ConnectX-7 400G per 4-GPU tray)"},
                devices_per_node=4),
    ))

    # Reference rental prices (market data, not hardware facts; a cluster file's price_per_hour overrides them).
    prices = (
        ReferencePrice("nvidia-a10g", 1.01, MELANGE_REPO + "main.py (A10G $1.01/h, the price Mélange used)"),
        ReferencePrice("nvidia-a100-sxm-80gb", 3.67,
                       MELANGE_REPO + "config/example.json (A100-80GB $3.67/h, the price Mélange used)"),
        ReferencePrice("nvidia-l4", 0.81, GPU_PRICES + " (AWS on-demand L4, $0.81/h)"),
        ReferencePrice("nvidia-l40s", 1.84, GPU_PRICES + " (AWS on-demand L40S, $1.84/h)"),
        ReferencePrice("nvidia-h100-sxm", 8.22, GPU_PRICES + " (AWS on-demand H100 80GB, $8.22/h)"),
    )

    def execution(self, device: DeviceSpec) -> str:
        """A ROCm build of torch also answers ``torch.cuda``; only a CUDA build runs NVIDIA stages natively."""
        try:
            import torch
        except ImportError:
            return "emulated"
        return "emulated" if getattr(torch.version, "hip", None) else super().execution(device)


BACKEND = NvidiaBackend()
