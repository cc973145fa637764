"""Intel Gaudi accelerators (Intel Gaudi software, formerly SynapseAI). Numbers from
../shared/reference/hardware_facts.yaml, sources inline.

Peaks are the MME (matrix engine) rates Intel publishes, BF16 and FP8 only;
FP16, INT8 and FP32 run on Gaudi but their rates are not published, so they are
left out. Gaudi 3 uses 1,677 TFLOPS, the rate at the 1,600 MHz MME clock parts
ship with (the white paper's 1,835 assumes 1,750 MHz). Scale-up and scale-out
both run over the chip's integrated RoCE ports: 21 of them go all-to-all to the
7 other chips of a node (3 per peer), 3 leave the node.
"""

from __future__ import annotations

from backends.base import Backend, hgx_node
from backends.engines.vllm import GAUDI_VLLM, VLLM_RELEASE
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

GAUDI2_PAPER = ("https://www.intel.com/content/www/us/en/content-details/839363/"
                "intel-gaudi-2-ai-accelerators-white-paper.html")
GAUDI3_PAPER = ("https://www.intel.com/content/www/us/en/content-details/817486/"
                "intel-gaudi-3-ai-accelerator-white-paper.html")
GAUDI_NETWORK = "https://docs.habana.ai/en/latest/Management_and_Monitoring/Network_Configuration/index.html"
ACCEL_TABLE = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
# What the runtime reports as the card's memory: hl-smi prints 98304 MiB for the Gaudi 2 (HL-225) and 131072 MiB for
# the Gaudi 3 (HL-325L), i.e. 96 and 128 GiB (103.1 and 137.4 GB); the white papers' "96 GB" and "128 GB" are those
# binary sizes ([Note: KV memory] in cost_models/serving.py).
HL_SMI_GAUDI2 = ("https://github.com/vdwarakn/scripts-and-utils/blob/09b2cfa7752b4ed1bcd258e490d2dc983c5a5c7b/gaudi/"
                 "README.md (hl-smi 1.21.1 on 8x HL-225: 98304MiB each)")
HL_SMI_GAUDI3 = ("https://github.com/ibm-cloud-docs/openshift/blob/e8eca99b34681055b93eb9fd4bea938238fcd759/"
                 "openshift_app_deploy.md (hl-smi 1.21.0 on 8x HL-325L: 131072MiB each)")
GIB = 1 << 30
NETWORK_TABLE = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"

# [Note: product node labels] The Intel Gaudi base operator's feature discovery labels nodes
# `habana.ai/product.name` (the key llm-d's workload-variant-autoscaler reads, internal/discovery in
# https://github.com/llm-d/llm-d-workload-variant-autoscaler, with `Intel-Gaudi-2-96GB` as its Gaudi 2 example).
# The Gaudi 3 value follows that pattern (assumption: check `kubectl get nodes -L habana.ai/product.name` and
# override with `node_selector` in the cluster file). Intel's DRA driver publishes DeviceClass gaudi.intel.com.
PRODUCT_NAME = {"intel-gaudi2": "Intel-Gaudi-2-96GB", "intel-gaudi3": "Intel-Gaudi-3-128GB"}

IDLE = "assumption: Intel publishes no idle power; ~10% of TDP, the same rule as the GPUs"
ROCE_SCALE_UP_LATENCY = ("assumption: ~10 us per HCCL collective step; scale-up runs over RDMA Ethernet ports, "
                         "not a memory-semantic fabric")
ROCE_LATENCY = "assumption: ~10 us per message across RoCE including software"


def _gaudi(id: str, product: str, tflops: dict[str, float], hbm: tuple[float, float], tdp_w: float,
           port_gbit_per_s: float, src: dict[str, str]) -> DeviceSpec:
    """One OAM chip with 24 RoCE ports of `port_gbit_per_s`: 21 scale up, 3 scale out.

    `tflops` are dense TFLOPS; `hbm` is (bytes, bytes/s); `src` gives ``flops``,
    ``memory`` (bandwidth), ``capacity``, ``tdp_w``, ``devices_per_node``, ``scale_up``
    and ``scale_out`` sources.
    """
    capacity_bytes, bw_bytes_per_s = hbm
    return DeviceSpec(
        id=id, vendor="Intel", product=product, family="gaudi", form="chip",
        peak_flops_per_s=tuple(sorted((k, v * 1e12) for k, v in tflops.items())),
        memory=(MemoryTier("hbm", capacity_bytes, bw_bytes_per_s),),
        tdp_w=tdp_w, idle_w=round(0.1 * tdp_w),
        devices_per_node=8,
        scale_up=Link(f"integrated RoCE, 21x{port_gbit_per_s:.0f}GbE all-to-all", 21 * port_gbit_per_s * 1e9 / 8,
                      10e-6, 8),
        scale_out=Link(f"integrated RoCE, 3x{port_gbit_per_s:.0f}GbE", 3 * port_gbit_per_s * 1e9 / 8, 10e-6, 1 << 16),
        k8s_resource="habana.ai/gaudi", torch_device="hpu",
        software="Intel Gaudi software (SynapseAI), PyTorch bridge, Optimum Habana, vLLM",
        image="vault.habana.ai/gaudi-docker/1.21.0/ubuntu22.04/habanalabs/pytorch-installer-2.6.0:latest",
        k8s_node_labels=(("habana.ai/product.name", PRODUCT_NAME[id]),), dra_device_class="gaudi.intel.com",
        sources=tuple(sorted({
            **{f"peak_flops_per_s.{k}": src["flops"] for k in tflops},
            "memory.hbm.capacity_bytes": src["capacity"], "memory.hbm.bw_bytes_per_s": src["memory"],
            "tdp_w": src["tdp_w"], "idle_w": IDLE, "devices_per_node": src["devices_per_node"],
            "scale_up.bw_bytes_per_s": src["scale_up"], "scale_up.latency_s": ROCE_SCALE_UP_LATENCY,
            "scale_out.bw_bytes_per_s": src["scale_out"], "scale_out.latency_s": ROCE_LATENCY,
        }.items())),
    )


class GaudiBackend(Backend):
    family = "gaudi"
    # vLLM through the vllm-gaudi platform plugin; no prebuilt image is published (its Dockerfiles build one),
    # so a Gaudi pool's cluster entry names the image it built.
    engines = (
        EnginePlatform(engine="vllm", platform="gaudi", version=VLLM_RELEASE, image=None, kv_buffer_device="cpu",
                       plugin="vllm-gaudi", env=(("PT_HPU_LAZY_MODE", "1"),), kv_layout="HND", kv_block_size=128,
                       source=GAUDI_VLLM),
    )
    # Wall power: the HGX host share ([Note: node power shares]); Gaudi's NICs are on the chip, so an upper bound.
    devices = tuple(hgx_node(d) for d in (
        _gaudi("intel-gaudi2", "Gaudi 2 (HL-225, OAM, 96GB HBM2E)", {"bf16": 432, "fp8": 865}, (96 * GIB, 2.46e12),
               600, 100, {"flops": GAUDI2_PAPER + " (MME rates)", "memory": GAUDI2_PAPER, "tdp_w": GAUDI2_PAPER,
                          "capacity": HL_SMI_GAUDI2 + "; " + GAUDI2_PAPER + " (96 GB)",
                          "devices_per_node": GAUDI2_PAPER,
                          "scale_up": NETWORK_TABLE + " (21x100GbE = 262.5 GB/s per direction)",
                          "scale_out": NETWORK_TABLE + " (3x100GbE = 300 Gb/s)"}),
        _gaudi("intel-gaudi3", "Gaudi 3 (HL-325L, OAM air-cooled, 128GB HBM2e)", {"bf16": 1677, "fp8": 1677},
               (128 * GIB, 3.67e12), 900, 200,
               {"flops": ACCEL_TABLE + " (1,677 at the shipped 1,600 MHz MME clock; white paper 1,835 at 1,750 MHz)",
                "memory": GAUDI3_PAPER, "capacity": HL_SMI_GAUDI3 + "; " + GAUDI3_PAPER + " (128 GB)",
                "tdp_w": GAUDI3_PAPER + " (air-cooled OAM; 1,200 W liquid-cooled)",
                "devices_per_node": GAUDI_NETWORK,
                "scale_up": GAUDI_NETWORK + " (21x200GbE = 525 GB/s per direction)",
                "scale_out": GAUDI_NETWORK + " (3x200GbE = 600 Gb/s)"}),
    ))

    def execution(self, device: DeviceSpec) -> str:
        """``torch.hpu`` exists once the Intel Gaudi PyTorch bridge is imported; without it, emulated."""
        try:
            import habana_frameworks.torch  # noqa: F401  (registers torch.hpu)
        except ImportError:
            return "emulated"
        return super().execution(device)


BACKEND = GaudiBackend()
