"""`Precision`: the one value that decides weight and KV-cache dtypes everywhere. Standard library only.

Every pass that sizes or costs weights or KV (pool options, deployments,
estimates, the plan, the KV hand-off) takes a `Precision` instead of loose
dtype strings, so they cannot disagree. The default KV dtype follows the
weights, except under fp4 weights, where serving engines keep the KV cache
in fp8 (4-bit KV loses too much accuracy to be a default).

Routed experts and the rest may be stored apart: ``dense`` (None by default:
``weights``) is the dtype of every weight outside the routed experts. GPT-OSS's
checkpoint quantises only its experts to MXFP4 and keeps attention, router,
embeddings and head in bf16 (`compiler.inputs.model_spec.checkpoint_precision`).

Storage and compute are separate: ``compute`` (None by default) is the dtype
matmuls run at. Unset, a device computes at the weight dtype, or, where it
has no rate for that dtype, at 16 bits (weight-only quantisation: GPT-OSS's
4-bit experts on H100, AWQ/GPTQ W4A16 checkpoints;
`cost_models.roofline.COMPUTE_FALLBACK`); set, it forces one.

>>> Precision.of("fp4")
Precision(weights='fp4', kv='fp8', compute=None, dense=None)
>>> Precision.of("bf16", kv="fp8").kv_bytes
1
>>> Precision.from_json(Precision.of("fp8").to_json()) == Precision.of("fp8")
True
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes per element of each storage dtype the tool reasons about.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}

#: torch's (and HF configs' ``torch_dtype``) names of the dtypes that have one.
TORCH_DTYPES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

#: Weight dtypes a deployment may be compiled at (fp32 is for host calibration).
WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4")


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}") from None


def default_kv_dtype(weights: str) -> str:
    """KV-cache dtype when none is given: the weight dtype, but fp8 under fp4 weights."""
    return "fp8" if weights == "fp4" else weights


@dataclass(frozen=True, slots=True)
class Precision:
    """Storage dtypes of one deployment: ``weights`` and the ``kv`` cache."""

    weights: str
    kv: str
    compute: str | None = None
    dense: str | None = None  # weights outside the routed experts (None: `weights`)

    def __post_init__(self) -> None:
        # unknown dtypes fail here, not deep in a cost model
        dtype_bytes(self.weights), dtype_bytes(self.kv), dtype_bytes(self.compute or self.weights)
        dtype_bytes(self.dense or self.weights)

    @staticmethod
    def of(weights: str, kv: str | None = None, compute: str | None = None) -> Precision:
        return Precision(weights, kv or default_kv_dtype(weights), compute)

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight element (of the routed experts, where `dense` stores the rest apart)."""
        return dtype_bytes(self.weights)

    @property
    def dense_bytes(self) -> float:
        """Bytes per weight element outside the routed experts."""
        return dtype_bytes(self.dense or self.weights)

    def weights_bytes(self, params: float, expert_params: float = 0.0) -> float:
        """Bytes of `params` weights, `expert_params` of them in routed experts (stored at `weights`; the rest at
        `dense`)."""
        return expert_params * self.weight_bytes + (params - expert_params) * self.dense_bytes

    @property
    def kv_bytes(self) -> float:
        """Bytes per KV-cache element."""
        return dtype_bytes(self.kv)

    def to_json(self) -> dict[str, str]:
        out = {"weights": self.weights, "kv": self.kv}
        if self.compute:
            out["compute"] = self.compute
        if self.dense:
            out["dense"] = self.dense
        return out

    @staticmethod
    def from_json(d: dict[str, str]) -> Precision:
        return Precision(d["weights"], d["kv"], d.get("compute"), d.get("dense"))
