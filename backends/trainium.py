"""AWS Trainium and Inferentia (Neuron SDK). Numbers from ../shared/reference/hardware_facts.yaml, sources inline.

One device is one Neuron chip (``aws.amazon.com/neuron`` counts chips;
``aws.amazon.com/neuroncore`` counts cores). Neuron docs label memory in GiB
and GiB/s in places; those are converted with 2**30, everything else is
decimal. Stages run emulated on the host: torch-neuronx compiles through
XLA, which this compiler does not drive (``torch_device`` is None).

AWS publishes no chip power, and NeuronLink figures without a direction:
both are labelled assumptions below, each saying what it rests on.
"""

from __future__ import annotations

from backends.base import HGX_HOST_RULE, HGX_HOST_W_PER_DEVICE, Backend, on_node
from backends.engines.vllm import NEURON_VLLM, VLLM_RELEASE
from compiler.ir.device_spec import DeviceSpec, Link, MemoryTier
from compiler.ir.engine_platform import EnginePlatform

GIB = 2**30

TRN1_PAGE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html"
TRN1_INSTANCE = ("https://awsdocs-neuron.readthedocs-hosted.com/en/v2.9.1/_sources/general/arch/neuron-hardware/"
                 "trn1-arch.rst.txt")
TRN2_PAGE = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/"
             "trainium2.html")
NEURON_GITHUB = "https://github.com/aws-neuron/aws-neuron-sdk/blob/master"
TRN2_COMPARE = NEURON_GITHUB + "/about-neuron/arch/neuron-hardware/trainium2.rst"
TRN2_INSTANCE = NEURON_GITHUB + "/general/arch/neuron-hardware/trn2-arch.rst"
INF2_PAGE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/inferentia2.html"
INF2_INSTANCE = NEURON_GITHUB + "/general/arch/neuron-hardware/inf2-arch.rst"
TRN2_POWER_NOTE = "https://nand-research.com/research-note-awss-new-trainium2"

# [Note: product node labels] Neuron chips come whole with their EC2 instance, so the node selector is the
# well-known label `node.kubernetes.io/instance-type` that every cloud node carries
# (https://kubernetes.io/docs/reference/labels-annotations-taints/#nodekubernetesioinstance-type), set to the
# instance each device's numbers come from. The Neuron DRA driver publishes DeviceClass neuron.aws.com.
INSTANCE_TYPE = {"aws-trn1": "trn1.32xlarge", "aws-trn2": "trn2.48xlarge", "aws-inf2": "inf2.48xlarge"}

IDLE = "assumption: AWS publishes no idle power; ~10% of the assumed chip power, the same rule as the GPUs"
TRN2_POWER = ("assumption: AWS publishes no chip power; ~500 W per Trainium2 chip, the analyst figure in "
              + TRN2_POWER_NOTE)
NEURONCORE_V2_POWER = (
    "assumption: AWS publishes no chip power; ~300 W, scaled from Trainium2's assumed 500 W by throughput "
    "(190/667 BF16 TFLOPS) and AWS's claim that Trainium2 is up to 2x as energy efficient ("
    + TRN2_POWER_NOTE + "): 500 x 0.285 x 2 = 285 W, rounded up")
NEURONLINK_LATENCY = ("assumption: ~10 us per NeuronLink collective step; AWS publishes no latency, taken as "
                      "RDMA-network-class rather than NVLink-class")
EFA_LATENCY = "assumption: ~15 us per message across EFA (SRD) including software"


def _neuronlink(what: str, published: str, url: str) -> str:
    return (f"assumption: half of the published {published} ({url}), reading it as both directions summed as "
            f"vendors usually do; AWS does not state a direction ({what})")


def _neuron(id: str, product: str, tflops: dict[str, float], hbm: tuple[float, float], tdp: tuple[float, str],
            devices_per_node: int, scale_up: Link, scale_out: Link, src: dict[str, str]) -> DeviceSpec:
    """One Neuron chip. `tflops` are dense TFLOPS (TOPS for int8); `hbm` is (bytes, bytes/s); `tdp` (W, source).

    `src` gives ``flops``, ``memory``, ``devices_per_node``, ``scale_up`` and ``scale_out`` (bandwidth)
    sources; a full key (``scale_out.latency_s``) overrides a family assumption.
    """
    capacity_bytes, bw_bytes_per_s = hbm
    tdp_w, tdp_src = tdp
    return DeviceSpec(
        id=id, vendor="AWS", product=product, family="trainium", form="chip",
        peak_flops_per_s=tuple(sorted((k, v * 1e12) for k, v in tflops.items())),
        memory=(MemoryTier("hbm", capacity_bytes, bw_bytes_per_s),),
        tdp_w=tdp_w, idle_w=round(0.1 * tdp_w),
        devices_per_node=devices_per_node,
        scale_up=scale_up, scale_out=scale_out,
        k8s_resource="aws.amazon.com/neuron",
        k8s_note="whole chips; request NeuronCores instead with aws.amazon.com/neuroncore (Neuron device plugin)",
        torch_device=None, software="AWS Neuron SDK (torch-neuronx, NxD Inference, vLLM-neuron)",
        image="public.ecr.aws/neuron/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04",
        k8s_node_labels=(("node.kubernetes.io/instance-type", INSTANCE_TYPE[id]),), dra_device_class="neuron.aws.com",
        sources=tuple(sorted({
            **{f"peak_flops_per_s.{k}": src["flops"] for k in tflops},
            "memory.hbm.capacity_bytes": src["memory"], "memory.hbm.bw_bytes_per_s": src["memory"],
            "tdp_w": tdp_src, "idle_w": IDLE, "devices_per_node": src["devices_per_node"],
            "scale_up.bw_bytes_per_s": src["scale_up"], "scale_up.latency_s": NEURONLINK_LATENCY,
            "scale_out.bw_bytes_per_s": src["scale_out"], "scale_out.latency_s": EFA_LATENCY,
            **{k: v for k, v in src.items() if "." in k},
        }.items())),
    )


# Trainium and Inferentia2 are both two NeuronCore-v2 ("cFP8" is AWS's configurable FP8).
NEURONCORE_V2_TFLOPS = {"bf16": 190, "fp16": 190, "fp8": 190, "int8": 380, "fp32": 47.5}


def _instance_node(spec: DeviceSpec) -> DeviceSpec:
    """Wall power per chip: AWS publishes no instance power, so the chip's assumed power plus an 8-way server's
    host share (CPUs, NICs, fans: 8 x the HGX share per GPU) split over the instance's chips."""
    host_w = 8 * HGX_HOST_W_PER_DEVICE / spec.devices_per_node
    return on_node(spec, spec.tdp_w + host_w, "assumed",
                   f"{HGX_HOST_RULE}; one such host per {spec.devices_per_node}-chip instance, "
                   f"8 x {HGX_HOST_W_PER_DEVICE:.0f} W / {spec.devices_per_node} = {host_w:.1f} W per chip")


class TrainiumBackend(Backend):
    family = "trainium"
    # vLLM through the vllm-neuron platform plugin (NxD Inference underneath), in AWS's Deep Learning Container.
    engines = (
        EnginePlatform(engine="vllm", platform="neuron", version=VLLM_RELEASE,
                       image="public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:latest", kv_buffer_device="cpu",
                       plugin="vllm-neuron", env=(("VLLM_PLUGINS", "neuron"),), source=NEURON_VLLM,
                       static_shapes=True),
    )
    devices = tuple(_instance_node(d) for d in (
        _neuron("aws-trn1", "Trainium (trn1.32xlarge chip, 2x NeuronCore-v2, 32 GiB HBM)", NEURONCORE_V2_TFLOPS,
                (32 * GIB, 820 * GIB), (300, NEURONCORE_V2_POWER), 16,
                Link("NeuronLink-v2 (2D torus, 16 chips)", 384e9 / 2, 10e-6, 16),
                Link("EFA 800 Gb/s per 16 chips", 800e9 / 8 / 16, 15e-6, 1 << 16),
                {"flops": TRN1_PAGE, "memory": TRN1_PAGE + " (32 GiB, 820 GiB/s)",
                 "devices_per_node": TRN1_INSTANCE,
                 "scale_up": _neuronlink("trn1.32xlarge", "384 GB/s per chip", TRN2_COMPARE),
                 "scale_out": TRN1_INSTANCE + " (trn1.32xlarge: 800 Gb/s EFA / 16 chips; trn1n doubles it)"}),
        _neuron("aws-trn2", "Trainium2 (trn2.48xlarge chip, 8x NeuronCore-v3, 96 GiB HBM)",
                {"bf16": 667, "fp16": 667, "fp8": 1299, "fp32": 181},
                (96 * GIB, 2.9e12), (500, TRN2_POWER), 16,
                # Intra-instance 4x4 torus; the 64-chip UltraServer adds 256 GB/s per chip between instances.
                Link("NeuronLink-v3 (4x4 2D torus, 16 chips)", 1024e9 / 2, 10e-6, 16),
                Link("EFAv3 3.2 Tb/s per 16 chips", 3200e9 / 8 / 16, 15e-6, 1 << 16),
                {"flops": TRN2_PAGE + " (dense; the 2,563 TFLOPS figure is 4:1 sparse)",
                 "memory": TRN2_PAGE + " (96 GiB, 2.9 TB/s)", "devices_per_node": TRN2_INSTANCE,
                 "scale_up": _neuronlink("trn2.48xlarge", "1,024 GB/s per chip intra-instance NeuronLink-v3",
                                         TRN2_INSTANCE),
                 "scale_out": TRN2_INSTANCE + " (3,200 Gb/s EFA per instance / 16 chips; the table's 'GB/s' "
                                              "is a units slip)"}),
        _neuron("aws-inf2", "Inferentia2 (inf2.48xlarge chip, 2x NeuronCore-v2, 32 GiB HBM)", NEURONCORE_V2_TFLOPS,
                (32 * GIB, 820 * GIB), (300, NEURONCORE_V2_POWER + "; Inferentia2 is the same chip generation"), 12,
                Link("NeuronLink-v2 (ring, 12 chips)", 192 * GIB / 2, 10e-6, 12),
                Link("ENA 100 Gb/s per 12 chips (no EFA)", 100e9 / 8 / 12, 50e-6, 1 << 16),
                {"flops": INF2_PAGE, "memory": INF2_PAGE + " (32 GiB, 820 GiB/s)",
                 "devices_per_node": INF2_INSTANCE + " (inf2.48xlarge; 24xlarge has 6, smaller sizes 1)",
                 "scale_up": _neuronlink("inf2.48xlarge", "192 GiB/s per device", INF2_INSTANCE),
                 "scale_out": "assumption: inf2.48xlarge has 100 Gb/s ENA networking (AWS product page, not "
                              "verified in hardware_facts.yaml), shared by 12 chips",
                 "scale_out.latency_s": "assumption: ~50 us per message over ENA TCP (Inf2 has no EFA/RDMA)"}),
    ))


BACKEND = TrainiumBackend()
