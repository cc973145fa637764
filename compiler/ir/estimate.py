"""`Estimate`: the predicted serving metrics of one homogeneous deployment (``gimletc estimate``).

Standard library only. Every number is a prediction of the cost model, never a
measurement; `to_json` says so (``"prediction": true``). `KEYS` are the
documented metric keys of ``gimletc estimate --json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from compiler.ir.prediction import COVERAGE, Interval

KEYS = ("ttft_ms", "tpot_ms", "e2e_latency_s", "output_tokens_per_s", "total_tokens_per_s", "tokens_per_s_per_user",
        "batch", "fits", "memory_bytes", "power_w", "energy_j_per_token", "bound", "intervals", "warnings")
MODES = ("batch", "batch_max", "concurrency")
#: Each predicted metric's interval: which kind of residual bounds it (`cost_models.spreads.METRICS`, or ``power``:
#: the devices' idle and rated power), and whether it is a rate (the inverse of that time).
INTERVAL_OF = {"ttft_ms": ("ttft", False), "tpot_ms": ("tpot", False), "e2e_latency_s": ("e2e", False),
               "output_tokens_per_s": ("e2e", True), "total_tokens_per_s": ("e2e", True),
               "tokens_per_s_per_user": ("tpot", True), "energy_j_per_token": ("e2e", False),
               "power_w": ("power", False)}


@dataclass(frozen=True, slots=True)
class Estimate:
    """One deployment's predicted metrics; ``batch`` is per replica, rates are for the whole deployment."""

    model: str
    device: str
    count: int
    tp: int
    pp: int
    replicas: int
    dtype: str
    kv_dtype: str
    input_len: int
    output_len: int
    mode: str
    ttft_ms: float
    tpot_ms: float
    e2e_latency_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    tokens_per_s_per_user: float
    batch: int
    max_batch: int
    fits: bool
    memory_bytes: float
    memory_capacity_bytes: float
    power_w: float
    energy_j_per_token: float
    bound_prefill: str
    bound_decode: str
    derate: str
    interference: float | None = None  # concurrency mode: step slowdown from prefill chunks
    prefill_tokens_per_step: float | None = None
    weight_tiers: dict[str, float] = field(default_factory=dict)  # share of a device's weights in each tier
    kv_tiers: dict[str, float] = field(default_factory=dict)
    fast_tier: str = ""
    resident_devices: int = 0  # fewest devices per replica holding the weights in `fast_tier` alone
    intervals: dict[str, Interval] = field(default_factory=dict)  # 80% interval of each `INTERVAL_OF` metric
    interval_basis: dict[str, str] = field(default_factory=dict)  # what each kind's interval rests on
    warnings: tuple[str, ...] = ()  # what the prediction assumes that the user should know (a context overridden)

    @property
    def bounded(self) -> bool:
        """Whether every latency and rate has a bounded interval (something measured pins it down)."""
        return all(i.bounded for i in self.intervals.values())

    @property
    def slow_tiers(self) -> list[str]:
        """Tiers below the fastest that weights or KV are read from: figures that depend on them say so."""
        return sorted({t for tiers in (self.weight_tiers, self.kv_tiers) for t, share in tiers.items()
                       if share > 0 and t != self.fast_tier})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prediction": True, **asdict(self)}
        out["intervals"] = {k: v.to_json() for k, v in self.intervals.items()}
        out["warnings"] = list(self.warnings)
        out["interval_coverage"] = COVERAGE
        out["bound"] = {"prefill": out.pop("bound_prefill"), "decode": out.pop("bound_decode")}
        out["slow_tiers"] = self.slow_tiers
        for key in ("interference", "prefill_tokens_per_step"):
            if out[key] is None:
                del out[key]
        return out
