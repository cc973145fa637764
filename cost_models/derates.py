"""Efficiency derates: how much of a datasheet peak real serving stacks reach.

Kept apart from `DeviceSpec` peaks on purpose. Each family's `Derate` is
fitted on ../shared/reference/measurements.csv only (``tools/fidelity.py``
prints the fit's errors) or, for the host CPU, measured by
``gimletc calibrate``; every factor says where it came from in `provenance`.
This module reads no files: a measured `Calibration` is handed to `derate_for`.

Fields:
- ``compute_eff``: fraction of dense peak FLOP/s reached by large matmuls and attention.
- ``vector_eff``: the same for elementwise FLOPs (vector units), rarely binding.
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
    measurements: int = 0  # how many published measurements pin the efficiencies down (< 2: an assumption)

    @property
    def assumed(self) -> bool:
        """Fewer than two measurements: the efficiencies are a guess, and the plan says what moving them changes."""
        return self.measurements < 2

    @staticmethod
    def ideal() -> "Derate":
        return Derate(1.0, 1.0, 1.0, 1.0, provenance="ideal roofline (no derate)", link_eff=1.0)


_FIT = ("fitted by `tools/fidelity.py --fit` on ../shared/reference/measurements.csv "
        "(coordinate descent over a plausible grid; {rows} rows: {ids})")

#: Per accelerator family. compute_eff, mem_eff, block_overhead_s and step_overhead_s come from
#: `tools/fidelity.py --fit`; the other fields keep the `Derate` defaults. Families with one to
#: three rows are fitted, not validated: `tools/fidelity.py --loo` reports the held-out error.
DERATES: dict[str, Derate] = {
    "nvidia": Derate(compute_eff=0.7, mem_eff=0.7, block_overhead_s=10e-6, step_overhead_s=1e-3, link_eff=0.7,
                     measurements=16, provenance=_FIT.format(rows=16, ids="the 16 NVIDIA rows (TensorRT-LLM, vLLM, Splitwise)")),
    "amd": Derate(compute_eff=0.5, mem_eff=0.9, block_overhead_s=20e-6, step_overhead_s=2e-3, link_eff=0.6,
                  measurements=1, provenance=_FIT.format(rows=1, ids="V062 (MI300X, vLLM)")),
    "trainium": Derate(compute_eff=0.3, mem_eff=0.5, block_overhead_s=40e-6, step_overhead_s=2e-3, link_eff=0.6,
                       measurements=3, provenance=_FIT.format(rows=3, ids="V079, V080 (trn2), V083 (trn1)")),
    "gaudi": Derate(compute_eff=0.8, mem_eff=0.9, block_overhead_s=0.0, step_overhead_s=0.0, link_eff=0.7,
                    measurements=3, provenance=_FIT.format(rows=3, ids="V084, V086 (Gaudi 2), V088 (Gaudi 3)")),
    "cerebras": Derate(compute_eff=0.3, mem_eff=0.4, block_overhead_s=8e-6, step_overhead_s=0.0, link_eff=0.8,
                       measurements=1, provenance=_FIT.format(rows=1, ids="V090 (CS-3, vendor claim)")),
    "dmatrix": Derate(compute_eff=0.5, mem_eff=0.6, block_overhead_s=10e-6, step_overhead_s=1.0e-3, link_eff=0.7,
                      provenance="assumption: no published d-Matrix measurements; NVIDIA-like launch overheads, "
                                 "mid-range efficiencies"),
    "cpu": Derate(compute_eff=0.7, mem_eff=0.7, vector_eff=0.2, elementwise_traffic=1.0, block_overhead_s=50e-6,
                  step_overhead_s=0.0, link_eff=0.5, provenance="assumption until `gimletc calibrate --device cpu-host`"),
}


GENERIC = Derate(compute_eff=0.5, mem_eff=0.7, block_overhead_s=20e-6, step_overhead_s=1.5e-3, link_eff=0.7,
                 provenance="assumption: generic derate for a family without measurements")


def derate_for(family: str, calibration: Calibration | None = None) -> Derate:
    """The family's derate; with a device's `Calibration` (``gimletc calibrate``), its measured fields replace it."""
    base = DERATES.get(family, GENERIC)
    if calibration is None:
        return base
    return replace(DERATES.get(calibration.family, base), **dict(calibration.derate), provenance=calibration.provenance)
