"""AMD Instinct GPUs (ROCm). Numbers from ../shared/reference/hardware_facts.yaml, sources inline.

AMD lists dense peaks next to "with structured sparsity" (2x) ones; the dense
ones are used. ``fp32`` is AMD's FP32 matrix rate. ROCm builds of PyTorch expose
these GPUs as the ``cuda`` device, so ``torch_device`` is ``cuda`` and
`AmdBackend.execution` tells a ROCm build from a CUDA one.

[Note: Infinity Fabric bandwidth under TP<8]
The scale-up figure is the GPU's whole xGMI budget (7 links x 64 GB/s per
direction on MI300X/MI325X), which only an 8-GPU collective uses: the
platform is a full mesh, so any *pair* of GPUs shares one 64 GB/s link
(~154 GB/s both ways on MI355X). Tensor parallelism over 2 or 4 GPUs
therefore sees roughly 1/7 of the listed bandwidth (stas00 measured a 2-GPU
all-reduce bus bandwidth of 47.7 GB/s vs 312.9 GB/s on 8). `Link` has one
bandwidth per device, so cost models that place TP<8 groups on these parts
must scale it down.
"""

from __future__ import annotations

from backends.base import Backend, hgx_node
from backends.engines.sglang import SGLANG_DOCKER, SGLANG_RELEASE
from backends.engines.vllm import ROCM_VLLM_DOCKER, VLLM_RELEASE
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

MI300X_PAGE = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
MI325X_PAGE = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html"
MI355X_PAGE = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"
MI355X_POWER = ("https://www.tomshardware.com/pc-components/gpus/"
                "amds-instinct-mi355x-accelerator-will-consume-1-400-watts")
MI355X_FABRIC = ("https://humeconsulting.co/amd-mi355x-strong-node-level-inference-but-not-yet-rack-scale"
                 " (secondary source: ~153.6 GB/s both ways per link x 7 = 1,075 GB/s)")
ACCEL_TABLE = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
NETWORK_TABLE = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"

# [Note: product node labels] The ROCm node labeller labels `amd.com/gpu.product-name` with the product name
# from sysfs, spaces as '_' (cmd/k8s-node-labeller/main.go in https://github.com/ROCm/k8s-device-plugin; its
# docs/user-guide/installation.md shows `amd.com/gpu.product-name=AMD_Instinct_MI300X_OAM`). MI325X and MI355X
# follow the same pattern (assumption: check `kubectl get nodes -L amd.com/gpu.product-name` and override with
# `node_selector` in the cluster file). The ROCm DRA driver publishes DeviceClass gpu.amd.com.
PRODUCT_NAME_LABEL = "amd.com/gpu.product-name"
PRODUCT_NAME = {"amd-mi300x": "AMD_Instinct_MI300X_OAM", "amd-mi325x": "AMD_Instinct_MI325X_OAM",
                "amd-mi355x": "AMD_Instinct_MI355X_OAM"}

IDLE = "assumption: AMD publishes no idle power; ~10% of TBP, the same rule as the NVIDIA GPUs"
XGMI_LATENCY = "assumption: ~5 us per Infinity Fabric collective step (RCCL small-message latency, NVLink-class)"
NIC = ("assumption: one 400 Gb/s RoCE/InfiniBand NIC per GPU, the typical 8-GPU MI300-series server build "
       "(hardware_facts.yaml says 'typical'; AMD sells no fixed node)")
NIC_LATENCY = "assumption: ~10 us per message across RoCE/InfiniBand including software"


def _instinct(id: str, product: str, tflops: dict[str, float], hbm: tuple[float, float], tdp_w: float,
              xgmi_bytes_per_s: float, src: dict[str, str]) -> DeviceSpec:
    """One 8-GPU-platform OAM part. `tflops` are dense TFLOPS (TOPS for int8); `hbm` is (bytes, bytes/s).

    `src` gives ``flops``, ``memory``, ``tdp_w`` and ``scale_up`` (bandwidth) sources.
    """
    capacity_bytes, bw_bytes_per_s = hbm
    return DeviceSpec(
        id=id, vendor="AMD", product=product, family="amd", form="chip",
        peak_flops_per_s=tuple(sorted((k, v * 1e12) for k, v in tflops.items())),
        memory=(MemoryTier("hbm", capacity_bytes, bw_bytes_per_s),),
        tdp_w=tdp_w, idle_w=round(0.1 * tdp_w),
        devices_per_node=8,
        # See [Note: Infinity Fabric bandwidth under TP<8]: this is the 8-GPU figure.
        scale_up=Link("Infinity Fabric (xGMI) 8-GPU full mesh", xgmi_bytes_per_s, 5e-6, 8),
        scale_out=Link("RoCE / InfiniBand 400G per GPU", 400e9 / 8, 10e-6, 1 << 16),
        k8s_resource="amd.com/gpu", torch_device="cuda", software="ROCm (vLLM, SGLang)",
        image="rocm/vllm:latest",
        k8s_node_labels=((PRODUCT_NAME_LABEL, PRODUCT_NAME[id]),), dra_device_class="gpu.amd.com",
        sources=tuple(sorted({
            **{f"peak_flops_per_s.{k}": (ACCEL_TABLE if k == "fp32" else src["flops"]) for k in tflops},
            "memory.hbm.capacity_bytes": src["memory"], "memory.hbm.bw_bytes_per_s": src["memory"],
            "tdp_w": src["tdp_w"], "idle_w": IDLE, "devices_per_node": src["memory"] + " (8 OAM GPUs per platform)",
            "scale_up.bw_bytes_per_s": src["scale_up"], "scale_up.latency_s": XGMI_LATENCY,
            "scale_out.bw_bytes_per_s": NIC, "scale_out.latency_s": NIC_LATENCY,
        }.items())),
    )


# MI325X has MI300X's compute (stas00 note 7); more, faster memory and a higher power limit.
CDNA3_TFLOPS = {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9, "fp32": 163.4}
XGMI_CDNA3 = NETWORK_TABLE + " (7 links x 64 GB/s per direction)"


class AmdBackend(Backend):
    family = "amd"
    # vLLM and SGLang run in-tree on ROCm (the same CUDA-style torch device API, HIP underneath).
    engines = (
        EnginePlatform(engine="vllm", platform="rocm", version=VLLM_RELEASE, image="rocm/vllm:latest",
                       kv_buffer_device="cuda", source=ROCM_VLLM_DOCKER),
        EnginePlatform(engine="sglang", platform="rocm", version=SGLANG_RELEASE,
                       image=f"lmsysorg/sglang:v{SGLANG_RELEASE}-rocm700-mi30x", kv_buffer_device="cuda",
                       source=SGLANG_DOCKER),
    )
    # Wall power: AMD sells no fixed platform, so each part takes the HGX host share ([Note: node power shares]).
    devices = tuple(hgx_node(d) for d in (
        _instinct("amd-mi300x", "Instinct MI300X 192GB HBM3 (CDNA 3, OAM)", CDNA3_TFLOPS, (192e9, 5.3e12), 750, 448e9,
                  {"flops": MI300X_PAGE, "memory": MI300X_PAGE, "tdp_w": MI300X_PAGE, "scale_up": XGMI_CDNA3}),
        _instinct("amd-mi325x", "Instinct MI325X 256GB HBM3E (CDNA 3, OAM)", CDNA3_TFLOPS, (256e9, 6.0e12), 1000,
                  448e9,
                  {"flops": MI325X_PAGE, "memory": MI325X_PAGE, "tdp_w": MI325X_PAGE, "scale_up": XGMI_CDNA3}),
        # Dense FP4 is 10 PF; the "20 PF FP4" press figure is sparse. No FP32 figure in the sources read.
        _instinct("amd-mi355x", "Instinct MI355X 288GB HBM3E (CDNA 4, OAM, liquid-cooled)",
                  {"bf16": 2516.6, "fp16": 2516.6, "fp8": 5033.2, "int8": 5033.2, "fp4": 10066.3},
                  (288e9, 8.0e12), 1400, 1075e9 / 2,
                  {"flops": MI355X_PAGE, "memory": MI355X_PAGE, "tdp_w": MI355X_POWER, "scale_up": MI355X_FABRIC}),
    ))

    def execution(self, device: DeviceSpec) -> str:
        """``native`` only on a ROCm build of torch with a visible GPU (a CUDA build also answers ``torch.cuda``)."""
        try:
            import torch
        except ImportError:
            return "emulated"
        return super().execution(device) if getattr(torch.version, "hip", None) else "emulated"


BACKEND = AmdBackend()
