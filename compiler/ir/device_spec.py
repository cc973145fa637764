"""Accelerators as data: datasheet numbers with units in their names and a source each.

A `DeviceSpec` holds what a vendor publishes (dense peak FLOP/s per dtype,
memory tiers, power, links, node size, deployment facts). Every number names
where it came from in ``sources`` (a URL, or a string starting with
``assumption:`` that says why the number was assumed); a test enforces it.
Efficiency derates are not here: they live in ``cost_models`` with their own
provenance, so a datasheet peak is never silently a fitted number.

>>> hbm = MemoryTier("hbm", capacity_bytes=80e9, bw_bytes_per_s=3.35e12)
>>> hbm.capacity_bytes / 1e9
80.0
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class MemoryTier:
    """One level of memory per device: ``sram`` (on-chip), ``hbm``/``dram`` (device), ``host``/``external``.

    ``serves`` is False for a tier no inference runtime keeps weights or KV in (Cerebras MemoryX streams
    weights for training; inference keeps them in wafer SRAM): it is listed, never used for serving.
    """

    name: str
    capacity_bytes: float
    bw_bytes_per_s: float
    serves: bool = True


@dataclass(frozen=True, slots=True)
class Link:
    """A per-device link: bandwidth one way, latency per message, devices it joins."""

    name: str
    bw_bytes_per_s: float
    latency_s: float
    domain_devices: int = 1


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device type. ``form`` says what one unit is: ``chip``, ``card`` or ``system``.

    ``peak_flops_per_s`` maps dtype (``fp32``, ``bf16``, ``fp16``, ``fp8``, ``fp4``, ``int8``) to the
    dense peak; a dtype absent from it is not supported natively.
    ``memory`` lists tiers fastest first; weights and KV live in the first serving tier that holds them
    (`cost_models.serving.memory_plan`), and time uses the tier actually read.
    ``k8s_resource`` is None where no public device plugin exists (``k8s_note`` says so).
    ``k8s_node_labels`` are the node labels a vendor's labeller publishes for this product (the default node
    selector of generated manifests); ``dra_device_class`` is the DeviceClass of the vendor's Dynamic Resource
    Allocation driver (None where there is none).
    ``torch_device`` names the torch device type that runs it natively (``cuda``, ``hpu``, ...);
    elsewhere stages execute emulated on the host CPU.
    ``sources`` maps each field name (dotted for nested numbers, e.g. ``memory.hbm.bw_bytes_per_s``)
    to a URL or an ``assumption: ...`` note.

    [Note: power footing] ``tdp_w`` is what the vendor rates the accelerator itself at (a board, an OAM
    module, or a whole system where the system is the unit: a CS-3). ``node_w_per_device`` is the wall power
    of the unit one deploys, per device: the accelerator plus its share of the host CPUs, memory, NICs,
    switches, fans and power-supply losses (a DGX H100's 10.2 kW over its 8 GPUs), so a CS-3 and an 8-GPU
    node compare on one footing. ``node_w_label`` says how that number is known: ``measured``, ``specified``
    (a system datasheet's maximum) or ``assumed`` (its source says why). None (an out-of-tree device that
    gives none) reads as ``tdp_w``; `cost_models.power` turns either into watts on a budget's footing.
    """

    id: str
    vendor: str
    product: str
    family: str
    form: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    memory: tuple[MemoryTier, ...]
    tdp_w: float
    idle_w: float
    devices_per_node: int
    scale_up: Link | None
    scale_out: Link | None
    k8s_resource: str | None
    k8s_note: str = ""
    torch_device: str | None = None
    software: str = ""
    image: str = ""
    sources: tuple[tuple[str, str], ...] = field(default=())
    k8s_node_labels: tuple[tuple[str, str], ...] = ()
    dra_device_class: str | None = None
    node_w_per_device: float | None = None
    node_w_label: str = ""  # measured | specified | assumed ([Note: power footing])

    @property
    def node_w(self) -> float:
        """Wall power of the deployable unit per device; ``tdp_w`` where the device gives none."""
        return self.tdp_w if self.node_w_per_device is None else self.node_w_per_device

    def peak(self, dtype: str) -> float | None:
        return dict(self.peak_flops_per_s).get(dtype)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.peak_flops_per_s)

    def tier(self, name: str) -> MemoryTier | None:
        for t in self.memory:  # a loop, not next(generator): the cost model asks this hundreds of thousands of times
            if t.name == name:
                return t
        return None

    @property
    def serving_tiers(self) -> tuple[MemoryTier, ...]:
        return tuple(t for t in self.memory if t.serves)

    @property
    def capacity_bytes(self) -> float:
        """All memory a stage can place weights and KV in (every serving tier)."""
        return sum(t.capacity_bytes for t in self.serving_tiers)

    @property
    def fast_capacity_bytes(self) -> float:
        """The fastest tier's capacity: what a placement whose weights stay resident there may use."""
        return self.memory[0].capacity_bytes

    def source(self, key: str) -> str | None:
        return dict(self.sources).get(key)

    def numbers(self) -> dict[str, float]:
        """Every published number by its source key (what must carry a source)."""
        out: dict[str, float] = {f"peak_flops_per_s.{d}": v for d, v in self.peak_flops_per_s}
        for t in self.memory:
            out[f"memory.{t.name}.capacity_bytes"] = t.capacity_bytes
            out[f"memory.{t.name}.bw_bytes_per_s"] = t.bw_bytes_per_s
        out["tdp_w"], out["idle_w"], out["devices_per_node"] = self.tdp_w, self.idle_w, self.devices_per_node
        if self.node_w_per_device is not None:
            out["node_w_per_device"] = self.node_w_per_device
        for name in ("scale_up", "scale_out"):
            link = getattr(self, name)
            if link is not None:
                out[f"{name}.bw_bytes_per_s"] = link.bw_bytes_per_s
                out[f"{name}.latency_s"] = link.latency_s
        return out

    def claims(self) -> list[str]:
        """Source keys of every number and every product claim (a tier that does not serve) that needs a source."""
        return sorted([*self.numbers(), *(f"memory.{t.name}.serves" for t in self.memory if not t.serves)])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "peak_flops_per_s":
                value = dict(value)
            elif f.name == "memory":
                value = [{"name": t.name, "capacity_bytes": t.capacity_bytes, "bw_bytes_per_s": t.bw_bytes_per_s,
                          "serves": t.serves} for t in value]
            elif isinstance(value, Link):
                value = {"name": value.name, "bw_bytes_per_s": value.bw_bytes_per_s, "latency_s": value.latency_s,
                         "domain_devices": value.domain_devices}
            elif f.name in ("sources", "k8s_node_labels"):
                value = dict(value)
            out[f.name] = value
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> DeviceSpec:
        kw = dict(d)
        kw["peak_flops_per_s"] = tuple(sorted(d["peak_flops_per_s"].items()))
        kw["memory"] = tuple(MemoryTier(**t) for t in d["memory"])
        for name in ("scale_up", "scale_out"):
            kw[name] = Link(**d[name]) if d.get(name) else None
        kw["sources"] = tuple(sorted(d.get("sources", {}).items()))
        kw["k8s_node_labels"] = tuple(sorted(d.get("k8s_node_labels", {}).items()))
        return DeviceSpec(**kw)
