"""Efficiency derates: how much of a datasheet peak real serving stacks reach.

Kept apart from `DeviceSpec` peaks on purpose. Each family's `Derate` is
fitted on published measurements: ../shared/reference/measurements.csv and,
for the non-NVIDIA families, cost_models/data/measurements_<family>.csv
(``tools/fidelity.py`` fits and prints the errors, leave-one-out included;
this module does not read those files) or, for the host CPU, measured by
``gimletc calibrate``; every factor says where it came from in `provenance`.
This module reads no files: a measured `Calibration` is handed to `derate_for`.

Fields:
- ``compute_eff``: fraction of dense peak FLOP/s reached by large matmuls and attention.
- ``fp8_compute_eff``: the same for matmuls computed at FP8, of the FP8 peak (None: ``compute_eff``; `matmul_eff`).
- ``vector_eff``: the same for elementwise FLOPs (vector units): rarely binding, save where a weight-only-quantised
  matmul converts its weights ([Note: weight-only dequantisation] in cost_models/roofline.py).
- ``mem_eff``: fraction of peak memory bandwidth reached by weight and KV streaming.
- ``elementwise_traffic``: fraction of the unfused elementwise traffic (norms, RoPE,
  activations) a serving engine still moves after kernel fusion.
- ``block_overhead_s``: fixed time per block per step (synchronisation, graph boundaries).
- ``op_overhead_s``: fixed time per aten call the block makes, views included (kernel launch or dispatch; near zero
  under CUDA graphs, tens of microseconds for eager PyTorch on a CPU).
- ``step_overhead_s``: fixed time per engine step (scheduling, sampling, host work).
- ``link_eff``: fraction of link bandwidth collectives reach.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.ir.calibration import Calibration


@dataclass(frozen=True, slots=True)
class Derate:
    compute_eff: float
    mem_eff: float
    vector_eff: float = 0.3
    elementwise_traffic: float = 0.3
    block_overhead_s: float = 0.0
    op_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    link_eff: float = 0.8
    provenance: str = ""
    measurements: int = 0  # how many published measurements of this device pin the efficiencies down (< 2: assumed)
    fp8_compute_eff: float | None = None
    unpinned: tuple[str, ...] = ()  # fitted fields the rows do not pin down: at a bound of the fit, or one group's

    def matmul_eff(self, dtype: str) -> float:
        """The share of `dtype`'s dense peak its matmuls and attention reach."""
        return self.fp8_compute_eff if dtype == "fp8" and self.fp8_compute_eff is not None else self.compute_eff

    @property
    def assumed(self) -> bool:
        """Fewer than two measurements: the efficiencies are a guess, and the plan says what moving them changes."""
        return self.measurements < 2

    def uncertain(self, fields: tuple[str, ...]) -> tuple[str, ...]:
        """The factors the plan's sensitivity moves: all of `fields` where the device is `assumed`, and every factor
        its rows do not pin down (`unpinned`: at a bound of its fit, or set by a single group of rows)."""
        return tuple(dict.fromkeys((fields if self.assumed else ()) + self.unpinned))

    @staticmethod
    def ideal() -> "Derate":
        return Derate(1.0, 1.0, 1.0, 1.0, provenance="ideal roofline (no derate)", link_eff=1.0)


#: The Cerebras family's per-layer and per-step costs (s) and leave-one-out median APE (%), from
#: `tools/fidelity.py --family cerebras --fit --loo` (the other fields are assumed: see its entry in `DERATES`).
CEREBRAS_BLOCK_S, CEREBRAS_STEP_S, CEREBRAS_LOO = 2.844e-6, 2.049e-5, 15.3

#: Provenance a user reads (``estimate``'s footer, plan.json): public sources only, no path of the team's own
#: reference files (../shared/reference/measurements.csv holds these rows, each with its source URL).
_PUBLISHED = "published benchmark results (vendor performance pages and papers)"
_FIT = ("fitted by `tools/fidelity.py --fit` on " + _PUBLISHED + " "
        "(coordinate descent over a plausible grid; {rows} rows: {ids})")
_FIT_DATA = ("fitted by `tools/fidelity.py --fit` on " + _PUBLISHED + " and "
             "cost_models/data/measurements_{family}.csv (bounded grid + Nelder-Mead, weak pull to the generic prior; "
             "{rows} rows: {ids}; leave-one-out median APE {loo}%{caveat})")

#: Per accelerator family. compute_eff, mem_eff, block_overhead_s and step_overhead_s come from
#: `tools/fidelity.py --fit`; the other fields keep the `Derate` defaults. `tools/fidelity.py --before-after`
#: reports each family's held-out (leave-one-out) error; a value at a bound of the fit (compute_eff 0.3,
#: step_overhead_s 4 ms) says the rows ask for more than the model's terms can give.
DERATES: dict[str, Derate] = {
    "nvidia": Derate(compute_eff=0.7, mem_eff=0.7, block_overhead_s=10e-6, step_overhead_s=1e-3, link_eff=0.7,
                     measurements=16, provenance=_FIT.format(rows=16, ids="the 16 NVIDIA rows (TensorRT-LLM, vLLM, Splitwise)")),
    "amd": Derate(compute_eff=0.3, mem_eff=0.4805, block_overhead_s=1e-7, step_overhead_s=4e-3, link_eff=0.6,
                  measurements=11, unpinned=("compute_eff", "step_overhead_s"), provenance=_FIT_DATA.format(
                      family="amd", rows=11, loo=5.3, ids="V062, AMD-01..AMD-10 (MI300X only: vLLM latency and "
                      "throughput runs of Llama-3.1-70B and 405B in fp8 on 8 GPUs; at the vLLM 0.9.1 / ROCm 6.4.1 "
                      "release, the October 2025 rows at its published speed, [Note: engine releases])",
                      caveat="; compute_eff and step_overhead_s sit at their bounds; no MI325X row, the MI355X's "
                             "are held out (cost_models/data/heldout/)")),
    # Refitted 2026-12-06 when the Trainium2 rows came to run padded to their launches' buckets ([Note: buckets] in
    # cost_models/serving.py): compute_eff 0.34 -> 0.3 (its bound), mem_eff 0.586 -> 0.565, block_overhead_s 3.5 ->
    # 0.5 us; leave one out 10.9% -> 9.7% (aws-trn2 20.2% -> 19.1%), held-out Trainium2 12.0% -> 4.1%.
    "trainium": Derate(compute_eff=0.3, mem_eff=0.5646, block_overhead_s=5.06e-7, step_overhead_s=4e-3,
                       link_eff=0.6, measurements=21, unpinned=("compute_eff", "step_overhead_s"),
                       provenance=_FIT_DATA.format(
                           family="trainium", rows=21, loo=9.7, ids="V079, V080, V083, TRN-01..TRN-18 (trn1 and "
                           "inf2 Neuron benchmark tables, trn2 NxD Inference tutorials, padded to the buckets their "
                           "launches compiled: cost_models/data/neuron_buckets.csv)",
                           caveat="; compute_eff and step_overhead_s sit at their bounds")),
    # Refitted when GAU-01, GAU-02 and GAU-16 came to fit memory ([Note: KV memory]): before, their KV read was
    # costed only for the part the memory plan had room for. Refitted again when prefill attention came to be
    # counted causally ([Note: causal prefill] in cost_models/roofline.py): compute_eff 0.48 -> 0.61, mem_eff
    # 0.855 -> 0.9 (its bound), step_overhead_s 1.1 -> 3.3 ms.
    "gaudi": Derate(compute_eff=0.6109, mem_eff=0.9, block_overhead_s=80e-6, step_overhead_s=3.33e-3,
                    link_eff=0.7, measurements=19, unpinned=("block_overhead_s", "mem_eff"), provenance=_FIT_DATA.format(
                        family="gaudi", rows=19, loo=15.3, ids="V084, V086, V088, GAU-01..GAU-16 (Intel Gaudi 2 and "
                        "Gaudi 3 model-performance tables, optimum-habana static batches)",
                        caveat=" (Gaudi 2 18.5%, Gaudi 3 15.3%); block_overhead_s and mem_eff sit at their bounds; "
                               "GAU-04 is overpredicted 1.6x")),
    # The Llama rows after the October 2024 release (CER-02..04) decode speculatively and are predicted with the
    # speculative model (drafter, k and acceptance assumed: Cerebras publishes none; cost_models/data/). Every row is
    # one user decoding: the fit (`tools/fidelity.py`, FITTED_FIELDS) sets the per-layer and per-step costs only, and
    # compute_eff and mem_eff stay assumed (unpinned: the plan's sensitivity moves them). It follows the later
    # releases: the August 2024 launch rows (V090, CER-01) ran about 2-3x slower per layer than later ones, and no
    # configuration published under both releases makes that an input ([Note: engine releases]).
    "cerebras": Derate(compute_eff=0.3, mem_eff=0.4, block_overhead_s=CEREBRAS_BLOCK_S, step_overhead_s=CEREBRAS_STEP_S,
                       link_eff=0.8, measurements=9, unpinned=("compute_eff", "mem_eff"), provenance=_FIT_DATA.format(
                           family="cerebras", rows=9, loo=CEREBRAS_LOO, ids="V090, CER-01..CER-08 (CS-3 vendor claims "
                           "and Artificial Analysis figures, one user; CER-02..04 speculative)",
                           caveat="; block_overhead_s and step_overhead_s only: compute_eff and mem_eff are assumed "
                                  "(one-user rows do not pin them); the launch rows V090 and CER-01 are predicted "
                                  "too fast")),
    # DMX-01 and DMX-02 are vendor targets, not measurements; a fit on both misses the held-out one by 9-224%.
    "dmatrix": Derate(compute_eff=0.5, mem_eff=0.6, block_overhead_s=10e-6, step_overhead_s=1.0e-3, link_eff=0.7,
                      provenance="assumption: no published d-Matrix measurement (two vendor targets in "
                                 "cost_models/data/measurements_dmatrix.csv, not fitted); NVIDIA-like launch "
                                 "overheads, mid-range efficiencies"),
    "cpu": Derate(compute_eff=0.7, mem_eff=0.7, vector_eff=0.2, elementwise_traffic=1.0, block_overhead_s=50e-6,
                  step_overhead_s=0.0, link_eff=0.5, provenance="assumption until `gimletc calibrate --device cpu-host`"),
}


GENERIC = Derate(compute_eff=0.5, mem_eff=0.7, block_overhead_s=20e-6, step_overhead_s=1.5e-3, link_eff=0.7,
                 provenance="assumption: generic derate for a family without measurements")

_SWEEP_KERNELS = ("fitted by `tools/fidelity_sweeps.py --fit` on the {device} rows of aiconfigurator's measured "
                  "serving sweeps (systems/silicon_sample.csv of aiconfigurator-core 0.12.0 on PyPI; TensorRT-LLM, "
                  "vLLM, SGLang; every engine on this device runs at them, [Note: one efficiency per device])")

#: [Note: one efficiency per device] A device's kernels reach one share of its peaks whoever serves it: where the
#: device's own serving measurements pin them down, these replace its family's `compute_eff`, `mem_eff` and
#: `fp8_compute_eff` (`derate_for` with the device id), under every engine and under none. An engine adds its own
#: overheads (`cost_models.engines.Engine.applied_to`); it does not replace the device's efficiencies. A device
#: without an entry runs at its family's, fitted on the family's other devices; for the leave-one-device-out check of
#: the sweeps (`tools/fidelity_sweeps.py --loo-by device`) that is how a held-out device is predicted.
#: The fit tries 0.7 to 0.9 for compute_eff and mem_eff and 0.4 to 0.7 for fp8_compute_eff (`KERNEL_EFFS`): a value
#: at an end of that range, or one that a single group of rows sets (the H200's FP8 share: Llama-3.1-8B under SGLang
#: alone), is `unpinned`, and the plan's sensitivity moves it.
DEVICE_EFFS: dict[str, dict] = {
    "nvidia-h100-sxm": dict(compute_eff=0.7, mem_eff=0.8, fp8_compute_eff=0.5, unpinned=("compute_eff",)),
    "nvidia-h200-sxm": dict(compute_eff=0.7, mem_eff=0.7, fp8_compute_eff=0.4,
                            unpinned=("compute_eff", "mem_eff", "fp8_compute_eff")),
}

#: Published measurements that pin each device's efficiencies down, counted per device id (not per family: the
#: MI355X has no row of its own however many MI300X rows the AMD fit has): the rows of
#: ../shared/reference/measurements.csv and cost_models/data/ its family's fit used (`NOT_FITTED` aside) and, for the
#: two Hopper GPUs, their serving-sweep rows. Held-out rows (cost_models/data/heldout/: the MI355X's among them) pin
#: nothing: no fit sees them. A device with fewer than two is `Derate.assumed`, and the plan's sensitivity moves its
#: factors. tests/cost_models/test_measurement_data.py recounts them from the files.
MEASURED_ROWS: dict[str, int] = {
    "nvidia-h100-sxm": 10 + 652, "nvidia-h200-sxm": 1 + 190, "nvidia-a100-sxm-80gb": 4, "nvidia-b200": 1,
    "amd-mi300x": 11, "aws-trn1": 11, "aws-inf2": 6, "aws-trn2": 4, "intel-gaudi2": 10, "intel-gaudi3": 9,
    "cerebras-cs3": 9,
}
@dataclass(frozen=True, slots=True)
class Hypothesis:
    """Another reading of a family's published rows than the one its derate is fitted on, and the derate fields
    that reading gives: the plan's sensitivity analysis applies it as a move of its own and says what it changes."""

    family: str
    name: str  # the move's name: ``<device>.<name>``
    fields: tuple[tuple[str, float], ...]
    reading: str


#: [Note: Cerebras per-user speed] Cerebras' public per-user speeds come from two releases. At the August 2024
#: launch Llama-3.1-70B ran at about 450 tokens/s per user (CER-01; Artificial Analysis measured 446) and
#: Llama-3.1-8B at 1,800 (V090). In October 2024 Cerebras announced 2,100 tokens/s on Llama-3.1-70B and said
#: speculative decoding was part of it (CER-02's source), and the later Llama figures (CER-02..04) are fitted as
#: speculative, with an assumed Llama-3.2-1B drafter (7 tokens, acceptance 0.741). No source says the Qwen3 and
#: GPT-OSS figures (CER-05..08) speculate, so they are fitted as plain decoding. The fit follows the later
#: releases: they are the service a buyer gets today, and they agree with one another (leave one out 15.3%).
#: It predicts the launch rows 3-4x too fast (CER-01: 1,890 tokens/s per user against 450), which is the other
#: reading: plain decoding at the launch's speed. Refitting with every later figure speculative does not
#: reconcile them (CER-01 still 1,760 tokens/s per user: the wafer's per-layer cost is what the later rows fix
#: either way, whatever their speculation), so the difference is the software between the releases, and the
#: launch reading is a per-layer cost of 13.3 us (4.7x the fit's, which meets CER-01 and puts V090 at 1,111
#: tokens/s against 1,800): `HYPOTHESES`, which the sensitivity analysis moves to (`cerebras-cs3.launch_speed`).
HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("cerebras", "launch_speed", (("block_overhead_s", 1.33e-5),),
               "plain decoding at the August 2024 launch's per-user speed (CER-01: 450 tokens/s on Llama-3.1-70B), "
               "not the later releases' ([Note: Cerebras per-user speed] in cost_models/derates.py)"),
)

#: Rows of the measurement files no derate is fitted on, and why.
NOT_FITTED: dict[str, str] = {
    "DMX-01": "a d-Matrix vendor target, not a measurement", "DMX-02": "a d-Matrix vendor target, not a measurement",
}


def derate_for(family: str, calibration: Calibration | None = None, device_id: str | None = None) -> Derate:
    """The family's derate; with `device_id`, that device's own efficiencies ([Note: one efficiency per device]) and
    its own count of measurements; with a device's `Calibration` (``gimletc calibrate``), its measured fields
    replace it."""
    base = DERATES.get(family, GENERIC)
    if calibration is not None:
        return replace(DERATES.get(calibration.family, base), **dict(calibration.derate),
                       provenance=calibration.provenance)
    if device_id is None:
        return base
    own = DEVICE_EFFS.get(device_id, {})
    provenance = base.provenance + (f"; {', '.join(sorted(k for k in own if k != 'unpinned'))} of {device_id}: "
                                    + _SWEEP_KERNELS.format(device=device_id) if own else "")
    return replace(base, **own, measurements=MEASURED_ROWS.get(device_id, 0), provenance=provenance)


# ------------------------------------------------------------------------------------------ engine releases

AMD_JULY_2025 = ("https://www.amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html "
                 "(container rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715)")
AMD_OCTOBER_2025 = ("https://www.amd.com/zh-cn/developer/resources/rocm-hub/dev-ai/performance-results.html "
                    "(container rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006)")


@dataclass(frozen=True, slots=True)
class ReleasePair:
    """One configuration a vendor measured under two releases of a serving stack: how much faster `release` ran it
    than `reference` ([Note: engine releases])."""

    family: str
    engine: str
    config: str  # model, precision, parallelism, batch and lengths, as published
    reference: str  # the engine version the family's derate is fitted at
    reference_value: float
    release: str
    value: float
    unit: str  # "s" (a latency: lower is faster) or "tokens/s" (higher is faster)
    ids: tuple[str, ...]  # measurement rows that are one of the two numbers
    source: str

    @property
    def speed(self) -> float:
        """How many times faster `release` ran the configuration than `reference`."""
        ratio = self.value / self.reference_value
        return 1.0 / ratio if self.unit == "s" else ratio


#: [Note: engine releases] A serving stack's releases differ in their kernels: AMD's ROCm performance page measured
#: the same MI300X configurations under the July 2025 vLLM container (ROCm 6.4.1, vLLM 0.9.1) and the October 2025 one
#: (ROCm 7.0.0, vLLM 0.10.2), and the later one is 1-9% faster on each. The family's derate is fitted at the
#: reference release (`RELEASE_REFERENCE`); a row measured under another release runs at that release's speed, an
#: input read from these published pairs (`release_speed`: the median over pairs, leaving out any pair whose numbers
#: include a row being predicted), not a refit that would spread the difference over every row. Only
#: `tools/fidelity.py` applies it (to the kernel efficiencies); `gimletc estimate` on an AMD GPU predicts the
#: reference release.
RELEASE_REFERENCE: dict[tuple[str, str], str] = {("amd", "vllm"): "0.9.1"}
RELEASE_PAIRS: tuple[ReleasePair, ...] = (
    ReleasePair("amd", "vllm", "Llama-3.1-70B FP8, TP 8, batch 1, input 128, output 2048 (benchmark_latency)",
                "0.9.1", 17.236, "0.10.2", 15.882, "s", ("V062", "AMD-03"), f"{AMD_JULY_2025}; {AMD_OCTOBER_2025}"),
    ReleasePair("amd", "vllm", "Llama-3.1-70B FP8, TP 8, batch 2, input 128, output 2048 (benchmark_latency)",
                "0.9.1", 18.057, "0.10.2", 17.934, "s", ("AMD-01",), f"{AMD_JULY_2025}; {AMD_OCTOBER_2025}"),
    ReleasePair("amd", "vllm", "Llama-3.1-70B FP8, TP 8, 3200 prompts of 128 + 2048 (benchmark_throughput)",
                "0.9.1", 12638.9, "0.10.2", 13212.5, "tokens/s", ("AMD-04",), f"{AMD_JULY_2025}; {AMD_OCTOBER_2025}"),
    ReleasePair("amd", "vllm", "Llama-3.1-405B FP8, TP 8, 1500 prompts of 128 + 2048 (benchmark_throughput)",
                "0.9.1", 3912.8, "0.10.2", 4201.7, "tokens/s", ("AMD-05",), f"{AMD_JULY_2025}; {AMD_OCTOBER_2025}"),
)


def release_speed(family: str, engine: str, version: str | None, exclude: frozenset[str] | set[str] = frozenset()
                  ) -> float:
    """How many times faster `engine` release `version` runs on `family` than the release its derate is fitted at:
    1 at the reference release, for an unknown version and for a family without published pairs; else the median
    speed of the published pairs of that release, leaving out any pair that includes a row of `exclude`."""
    reference = RELEASE_REFERENCE.get((family, engine))
    if reference is None or version is None or version == reference:
        return 1.0
    speeds = [p.speed for p in RELEASE_PAIRS if (p.family, p.engine, p.release) == (family, engine, version)
              and not set(p.ids) & set(exclude)]
    if not speeds:
        return 1.0
    speeds.sort()
    mid = len(speeds) // 2
    return speeds[mid] if len(speeds) % 2 else (speeds[mid - 1] + speeds[mid]) / 2
