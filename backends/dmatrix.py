"""d-Matrix Corsair (digital in-memory compute, PCIe card). Numbers from
../shared/reference/hardware_facts.yaml, sources inline.

Weights live in the card's 2 GB of DIMC SRAM first (150 TB/s), then in its
256 GB of LPDDR5X (0.4 TB/s). Only d-Matrix's block-floating-point rates are
published: MXINT8 (2,400 TFLOPS) fills the 8-bit slots ``fp8`` and ``int8``,
MXINT4 (9,600 TFLOPS) the 4-bit ``fp4`` slot. No BF16/FP16/FP32 rate is
published, so those dtypes are absent and a bf16 estimate reports them
unsupported. There is no public Kubernetes device plugin and no torch device:
stages run emulated on the host.
"""

from __future__ import annotations

from backends.base import Backend, pcie_node
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

PRODUCT_PAGE = "https://www.d-matrix.ai/product/"
REGISTER_SUMMARY = ("https://www.briefly.co/anchor/Artificial_intelligence/story/"
                    "d-matrix-aspires-to-rack-scale-ai-with-jetstream-io-cards")
PCIE = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"


class DmatrixBackend(Backend):
    family = "dmatrix"
    # Corsair serves through d-Matrix's own Aviator stack: a pool is an external OpenAI-compatible endpoint.
    engines = (EnginePlatform(engine="external", platform="external", version="", image=None, kv_buffer_device=None,
                              source="https://www.d-matrix.ai/product/ (Aviator software stack; no public engine "
                                     "plugin)"),)
    devices = (  # wall power: an 8-card PCIe server's host share ([Note: node power shares])
        pcie_node(DeviceSpec(
            id="dmatrix-corsair", vendor="d-Matrix", product="Corsair PCIe card (2 packages x 4 DIMC chiplets)",
            family="dmatrix", form="card",
            peak_flops_per_s=(("fp4", 9600e12), ("fp8", 2400e12), ("int8", 2400e12)),
            memory=(MemoryTier("sram", 2e9, 150e12), MemoryTier("dram", 256e9, 0.4e12)),
            tdp_w=600, idle_w=60,
            devices_per_node=8,
            # Pairs of cards join over the DMX Bridge, whose bandwidth is not published; PCIe Gen5 is the floor.
            scale_up=Link("PCIe Gen5 x16 (+ DMX Bridge pairs)", 63e9, 5e-6, 8),
            # JetStream: one 400G NIC per 4 cards.
            scale_out=Link("JetStream Ethernet NIC, 400G per 4 cards", 100e9 / 8, 2e-6, 1 << 16),
            k8s_resource=None, k8s_note="no public Kubernetes device plugin",
            torch_device=None, software="d-Matrix Aviator (MLIR, PyTorch, Triton DSL)", image="",
            sources=tuple(sorted({
                "peak_flops_per_s.fp8": PRODUCT_PAGE + " (2,400 TFLOPS MXINT8, block floating point)",
                "peak_flops_per_s.int8": PRODUCT_PAGE + " (2,400 TFLOPS MXINT8)",
                "peak_flops_per_s.fp4": PRODUCT_PAGE + " (9,600 TFLOPS MXINT4, block floating point)",
                "memory.sram.capacity_bytes": PRODUCT_PAGE, "memory.sram.bw_bytes_per_s": PRODUCT_PAGE,
                "memory.dram.capacity_bytes": REGISTER_SUMMARY + " (256 GB LPDDR5X; The Register via aggregator)",
                "memory.dram.bw_bytes_per_s": REGISTER_SUMMARY + " (400 GB/s; The Register via aggregator)",
                "tdp_w": REGISTER_SUMMARY + " (600 W per card; The Register via aggregator)",
                "idle_w": "assumption: d-Matrix publishes no idle power; ~10% of TDP, the same rule as the GPUs",
                "devices_per_node": REGISTER_SUMMARY + " (8 cards and 2 JetStream NICs per server)",
                "scale_up.bw_bytes_per_s": "assumption: DMX Bridge bandwidth is not published; PCIe Gen5 x16 "
                                           "(63 GB/s per direction, " + PCIE + ") taken as card-to-card bandwidth",
                "scale_up.latency_s": "assumption: ~5 us per card-to-card transfer over PCIe including the driver",
                "scale_out.bw_bytes_per_s": REGISTER_SUMMARY + " (one 400G JetStream NIC per 4 cards)",
                "scale_out.latency_s": REGISTER_SUMMARY + " (~2 us JetStream latency, d-Matrix's claim)",
            }.items())),
        )),
    )


BACKEND = DmatrixBackend()
