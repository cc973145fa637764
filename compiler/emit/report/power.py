"""Where a plan's power goes: per pool, the devices' rated power it provisions against the budget and the mean
draw the cost model predicts at its solved load; the inventory left dark; the budget; the footing all of them
count (``Plan.power_basis``: chip, node or facility, [Note: power basis] in `cost_models.power`).

Provisioned watts are each device's rated power on that footing (catalog ``tdp_w`` on chip, ``node_w`` on node,
times the PUE on facility; sourced) times devices, the quantity the placement holds under the budget; drawn
watts are the plan's predictions (``Pool.predicted_power_w``).

>>> from compiler.plan.schema import Pool
>>> pool = Pool(name="pool0", role="colocated", device="nvidia-h100-sxm", devices_per_replica=2, replicas=3, tp=2,
...             pp=1, batch=8, phases=["prefill", "decode"], stages=[], option="x", predicted_requests_per_s=1.0,
...             predicted_power_w=2500.0)
>>> row = pool_power(pool, "chip")
>>> row.devices, row.provisioned_w, row.drawn_w   # 6 x 700 W TDP
(6, 4200.0, 2500.0)
>>> pool_power(pool, "node").provisioned_w        # 6 x 1,275 W: a DGX H100's 10.2 kW over its 8 GPUs
7650.0
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.registry import device
from compiler.plan.schema import Plan, Pool
from cost_models.power import device_basis_w


@dataclass(frozen=True, slots=True)
class PoolPower:
    pool: str
    role: str
    device: str
    devices: int
    provisioned_w: float  # devices x rated power on the plan's footing
    drawn_w: float  # predicted mean draw while serving


@dataclass(frozen=True, slots=True)
class PowerBreakdown:
    pools: tuple[PoolPower, ...]
    budget_w: float | None
    dark_w: float  # rated power, on the footing, of the inventory no pool uses
    dark_devices: tuple[tuple[str, int], ...]  # (device type, devices no pool uses)
    basis: str = "chip"  # what every watt here counts ([Note: power basis])
    pue: float | None = None

    @property
    def provisioned_w(self) -> float:
        return sum(p.provisioned_w for p in self.pools)

    @property
    def drawn_w(self) -> float:
        return sum(p.drawn_w for p in self.pools)

    def to_json(self) -> dict:
        return {"budget_w": self.budget_w, "power_basis": self.basis, "pue": self.pue,
                "provisioned_w": self.provisioned_w, "drawn_w": self.drawn_w,
                "dark_w": self.dark_w, "dark_devices": dict(self.dark_devices), "prediction": True,
                "pools": [{"pool": p.pool, "role": p.role, "device": p.device, "devices": p.devices,
                           "provisioned_w": p.provisioned_w, "drawn_w": p.drawn_w} for p in self.pools]}


def device_w(device_id: str, basis: str, pue: float | None = None) -> float:
    """One device's rated power on `basis`."""
    return device_basis_w(device(device_id), basis, 1.0 if pue is None else pue)[0]


def pool_power(pool: Pool, basis: str, pue: float | None = None) -> PoolPower:
    devices = pool.replicas * pool.devices_per_replica
    return PoolPower(pool.name, pool.role, pool.device, devices, float(devices * device_w(pool.device, basis, pue)),
                     pool.predicted_power_w)


def power_breakdown(plan: Plan) -> PowerBreakdown:
    """Per pool provisioned and drawn watts, and the inventory left dark."""
    pools = tuple(pool_power(p, plan.power_basis, plan.pue) for p in plan.pools)
    used: dict[str, int] = {}
    for p in pools:
        used[p.device] = used.get(p.device, 0) + p.devices
    dark = tuple(sorted((d, n - used.get(d, 0)) for d, n in plan.inventory.items() if n > used.get(d, 0)))
    dark_w = float(sum(device_w(d, plan.power_basis, plan.pue) * n for d, n in dark))
    return PowerBreakdown(pools, plan.power_budget_w, dark_w, dark, plan.power_basis, plan.pue)
