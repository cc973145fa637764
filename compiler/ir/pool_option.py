"""`PoolOption`: one costed way to run one replica of a role; what the cost stage hands the placement.

Standard library only. ``kind`` is one of `POOL_KINDS`:

- ``colocated``: prefill and decode on the same replica (continuous batching with chunked prefill);
- ``prefill``: prompt processing only; its KV is handed off to a decode pool;
- ``decode``: token generation only, receiving KV from prefill pools;
- ``decode-af``: decode with attention (and the KV cache) on one device type and FFN/MoE on another.

Times are seconds, rates requests per second, power watts; every number is a
prediction of the cost model.

>>> o = PoolOption("decode:x:tp1:pp1:b8", "decode", (("x", 1),), power_w=400.0, provisioned_w=700.0,
...                rate_per_s=2.5, ttft_s=None, tpot_s=0.02, kv_device="x", tp=1, pp=1, batch=8)
>>> o.uses("x"), o.device_types, o.devices_per_replica
(1, ('x',), 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

POOL_KINDS: tuple[str, ...] = ("colocated", "prefill", "decode", "decode-af")


@dataclass(frozen=True, slots=True)
class PoolOption:
    """One replica of one role on specific devices, costed."""

    key: str
    kind: str
    devices: tuple[tuple[str, int], ...]  # (device id, devices per replica)
    power_w: float  # predicted mean draw of one replica while serving
    provisioned_w: float  # what the budget must reserve for it: the devices' TDP
    rate_per_s: float
    ttft_s: float | None
    tpot_s: float | None
    kv_device: str  # the device type that holds the KV this option produces or consumes
    tp: int
    pp: int
    batch: int
    slo_ok: bool = True
    detail: tuple[tuple[str, Any], ...] = ()

    def uses(self, device_id: str) -> int:
        return dict(self.devices).get(device_id, 0)

    @property
    def device_types(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.devices)

    @property
    def devices_per_replica(self) -> int:
        return sum(k for _, k in self.devices)

    @property
    def receives_kv(self) -> bool:
        """Decode-only options take their KV from a prefill pool."""
        return self.kind in ("decode", "decode-af")
