"""The cluster file: what a provider owns, or may buy. Device pools (catalog id, count, node size, price),
the bandwidth between pools, a power budget and a cost budget.

The power budget binds one footing, ``power_basis`` ([Note: power basis] in
`cost_models.power`): ``node`` (the default) counts each device's share of its
node's wall power, ``chip`` the accelerator's rated power alone, ``facility``
node power times the site's ``pue``.

A pool's ``count`` is a number (a fixed fleet) or ``any`` (fleet design: the
solver chooses how many, within the budgets; [Note: fleet design] in
`compiler.ir.placement`). Prices are dollars per device-hour: the entry's
``price_per_hour``, else the catalog's labelled reference price, if any.

A frozen pydantic model that rejects unknown fields, so a typo such as
``power_budget_k`` fails instead of being ignored; `compiler.inputs.load_cluster`
turns every failure into one line naming file, field and fix. Files speak kW,
GB/s (1e9 bytes/s) and microseconds; methods hand the compiler W, bytes/s and s.

>>> c = Cluster(name="lab", devices=[{"device": "nvidia-h100-sxm", "count": 8}], power_budget_kw=10)
>>> c.inventory(), c.power_budget_w, c.power_basis
({'nvidia-h100-sxm': 8}, 10000.0, 'node')
>>> d = Cluster(name="design", devices=[{"device": "nvidia-h100-sxm", "count": "any", "price_per_hour": 3.0}],
...             power_budget_kw=10, cost_budget_per_hour=30)
>>> d.inventory(), d.designed()
({'nvidia-h100-sxm': 7}, ('nvidia-h100-sxm',))
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from backends import registry
from compiler.inputs.served import ServedDevice, served
from compiler.inputs.yaml_file import Frozen
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput

GB = 1e9  # the files' GB/s are decimal gigabytes, as vendors quote them

#: The most devices one entry may count, and the most a ``count: any`` entry may buy: a million, five times the
#: largest fleet announced (xAI's Colossus, 200,000 GPUs). A count beyond it is a typo, not a fleet to cost (the
#: link queues' Erlang recursion walks every NIC of the pool).
MAX_DEVICES = 1_000_000
#: The largest power budget, 10 GW: a few times the largest AI campuses announced (a few GW each).
MAX_POWER_BUDGET_W = 1e10

# Kubernetes label syntax (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set)
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class Toleration(Frozen):
    """A Kubernetes toleration the pool's pods carry (for tainted accelerator nodes)."""

    key: str | None = Field(default=None, description="taint key, e.g. nvidia.com/gpu; absent with Exists = any")
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class Inventory(Frozen):
    """One device pool: how many of one catalog device the cluster owns."""

    device: str = Field(description="catalog id, as listed by `gimletc backends`")
    count: int | Literal["any"] = Field(
        description="devices of this type (chips, cards or systems, per the catalog's form), or `any`: the solver "
                    "chooses how many, as many as the power and cost budgets allow at most (fleet design)")
    price_per_hour: float | None = Field(
        default=None, gt=0, description="dollars per device-hour; default: the catalog's reference price, if any "
                                        "(read only for a cost budget or the cost and tokens-per-dollar objectives)")
    node_size: int | None = Field(
        default=None, ge=1, description="devices per node (scale-up domain); default: the catalog's devices_per_node")
    engine: str = Field(default="generic", description="serving engine of this pool: generic, trtllm, vllm or sglang "
                                                      "(its scheduler costs, cost_models/engines.py)")
    # Deployment (`compiler.emit.k8s`): none of these change the placement.
    node_selector: dict[str, str] | None = Field(
        default=None, description="node labels this pool's pods must match; default: the vendor's product label "
                                  "(k8s_node_labels in `gimletc backends --json`); {} selects any node")
    tolerations: tuple[Toleration, ...] = Field(default=(), description="tolerations for this pool's pods")
    k8s_resource: str | None = Field(
        default=None, description="extended resource to request per device, for devices without a public device "
                                  "plugin (Cerebras, d-Matrix); without it their pools are external endpoints")
    image: str | None = Field(
        default=None, description="container image of this pool's pods for the manifest target compiled: the "
                                  "engine's (default: its published image), or for the gimletc target an image "
                                  "with gimletc installed (default: gimletc:<version>, from the Dockerfile)")
    endpoints: tuple[str, ...] = Field(
        default=(), description="IP addresses of the external systems that serve this pool (devices without a "
                                "Kubernetes resource)")

    @field_validator("count", mode="before")
    @classmethod
    def _count(cls, value: object) -> object:
        if isinstance(value, bool) or (isinstance(value, str) and value != "any"):
            raise ValueError(f"{value!r} is not a count; give a whole number >= 1, or `any` to let the solver "
                             "choose within the budget")
        if isinstance(value, (int, float)) and value < 1:  # worded as pydantic words its own bounds
            raise PydanticCustomError("greater_than_equal", "Input should be greater than or equal to 1")
        if isinstance(value, (int, float)) and value > MAX_DEVICES:
            raise ValueError(f"{value:,.0f} devices in one pool is beyond any fleet (the largest has about 200,000); "
                             f"give the devices this pool has (at most {MAX_DEVICES:,}), or `any` to let the solver "
                             "choose within the budget")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        from backends.engines import costed_names

        if name not in costed_names():
            close = difflib.get_close_matches(name, costed_names(), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{name!r} is not a known serving engine; {hint}use one of {', '.join(costed_names())}")
        return name

    @model_validator(mode="after")
    def _engine_runs_on_the_device(self) -> Inventory:
        """A named engine must have a build for the device's family (`Backend.engines`), checked before tracing."""
        if self.engine == "generic":
            return self
        engines = [p.engine for p in registry.backend_of(registry.device(self.device)).engines]
        if engines and self.engine not in engines:
            raise ValueError(f"engine: {self.engine} does not run on {self.device}; use one of "
                             f"{', '.join(engines)} (or generic)")
        return self

    @field_validator("device")
    @classmethod
    def _known_device(cls, device_id: str) -> str:
        known = [d.id for d in registry.all_devices()]
        if device_id not in known:
            close = difflib.get_close_matches(device_id, known, n=3)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise ValueError(f"{device_id!r} is not a known device id; {hint}`gimletc backends` lists the ids")
        return device_id

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, selector: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (selector or {}).items():
            if not _LABEL_KEY.fullmatch(key) or len(key.rsplit("/", 1)[-1]) > 63:
                raise ValueError(f"{key!r} is not a Kubernetes label key (prefix/name, name of at most 63 "
                                 "letters, digits, '-', '_' or '.'); e.g. nvidia.com/gpu.product")
            if not _LABEL_VALUE.fullmatch(value):
                raise ValueError(f"{key}: {value!r} is not a Kubernetes label value (at most 63 letters, digits, "
                                 "'-', '_' or '.', starting and ending alphanumeric); quote numbers and booleans")
        return selector

    @field_validator("k8s_resource")
    @classmethod
    def _resource(cls, name: str | None) -> str | None:
        if name is not None and not _RESOURCE_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an extended resource name; give domain/name, e.g. example.com/wse")
        return name

    @field_validator("endpoints")
    @classmethod
    def _addresses(cls, endpoints: tuple[str, ...]) -> tuple[str, ...]:
        for address in endpoints:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"{address!r} is not an IP address; list the systems' IPv4 or IPv6 addresses") from None
        return endpoints


class LinkSpeed(Frozen):
    """Bandwidth and latency of a network path."""

    bandwidth_gb_per_s: float = Field(default=50.0, gt=0, description="aggregate bandwidth, GB/s (1e9 bytes/s)")
    latency_us: float = Field(default=20.0, ge=0, description="one-way latency per message, microseconds")


class LinkSpec(LinkSpeed):
    """The aggregate bandwidth available between two device pools (either direction)."""

    between: tuple[str, str] = Field(description="the two device ids this link joins (order does not matter); "
                                                 "one id twice gives that pool's own fabric")
    bandwidth_gb_per_s: float = Field(gt=0, description="aggregate bandwidth between the pools, GB/s (1e9 bytes/s)")
    latency_us: float = Field(ge=0, description="one-way latency per message, microseconds")


class Cluster(Frozen):
    """A fleet: device pools, links between pools, and a power budget.

    Pools not joined by an entry in ``links`` talk over ``default_link`` (the
    datacenter network). Within one pool, devices send over their catalog NICs (scale-out link), on a fabric
    that carries half the pool's NICs at line rate unless ``links`` gives it (an entry between [t, t]).
    """

    name: str
    power_budget_kw: float | None = Field(
        default=None, gt=0, description="power envelope in kW; none means unconstrained (a CLI flag may set it)")
    cost_budget_per_hour: float | None = Field(
        default=None, gt=0, description="dollars per hour the deployed devices may cost (prices: each entry's "
                                        "price_per_hour or the catalog's); none means unconstrained")
    power_basis: Literal["chip", "node", "facility"] = Field(
        default="node", description="what the power budget counts: node (each device's share of its node's wall "
                                    "power: host CPUs, NICs, switches, fans), chip (the accelerator's rated power "
                                    "alone) or facility (node power times pue)")
    pue: float | None = Field(
        default=None, ge=1.0, le=3.0, description="the facility's power usage effectiveness (total facility power "
                                                  "over IT power); needed by power_basis: facility")
    devices: tuple[Inventory, ...] = Field(min_length=1)
    links: tuple[LinkSpec, ...] = ()
    default_link: LinkSpeed = Field(
        default_factory=LinkSpeed, description="network between pools not listed in links")
    calibration: str | None = Field(
        default=None, description="a calibration profile of this fleet (a name or a file, made by `gimletc calibrate "
                                  "--from` from its benchmark runs): its devices' engine costs and intervals replace "
                                  "the shipped ones (a --calibration flag overrides it)")

    @field_validator("power_budget_kw")
    @classmethod
    def _sane_power_budget(cls, value: float | None) -> float | None:
        if value is not None and value * 1e3 > MAX_POWER_BUDGET_W:
            raise ValueError(f"{value:.3g} kW is beyond any site (the largest AI campuses draw a few GW); give the "
                             f"site's budget in kW, at most {MAX_POWER_BUDGET_W / 1e3:.0f} (10 GW)")
        return value

    @field_validator("devices")
    @classmethod
    def _each_device_once(cls, devices: tuple[Inventory, ...]) -> tuple[Inventory, ...]:
        first: dict[str, int] = {}
        for i, inv in enumerate(devices):
            if inv.device in first:
                raise ValueError(f"{inv.device!r} is listed twice (devices[{first[inv.device]}] and devices[{i}]); "
                                 "merge them into one entry with the summed count")
            first[inv.device] = i
        return devices

    @model_validator(mode="after")
    def _links_join_owned_pools(self) -> Cluster:
        owned = {inv.device for inv in self.devices}
        seen: dict[frozenset[str], int] = {}
        for i, link in enumerate(self.links):
            for device_id in link.between:
                if device_id not in owned:
                    raise ValueError(f"links[{i}].between: {device_id!r} is not in devices; "
                                     f"add it to devices or name one of: {', '.join(sorted(owned))}")
            pair = frozenset(link.between)
            if pair in seen:
                raise ValueError(f"links[{i}].between: {' <-> '.join(link.between)} is already given by "
                                 f"links[{seen[pair]}]; keep one of them")
            seen[pair] = i
        return self

    @model_validator(mode="after")
    def _facility_needs_pue(self) -> Cluster:
        if self.power_basis == "facility" and self.pue is None:
            raise ValueError("power_basis: facility counts node power times the facility's PUE; give pue (e.g. "
                             "pue: 1.3), or use power_basis: node")
        return self

    @model_validator(mode="after")
    def _cost_budget_needs_prices(self) -> Cluster:
        if self.cost_budget_per_hour is not None:
            for i, inv in enumerate(self.devices):
                if inv.price_per_hour is None and registry.reference_price(inv.device) is None:
                    raise ValueError(f"devices[{i}].price_per_hour: a cost budget needs a price for every device, "
                                     f"and the catalog has no reference price for {inv.device}; give one in dollars "
                                     "per device-hour")
        return self

    def inventory(self) -> dict[str, int]:
        """Device id -> count, in file order; a ``count: any`` pool counts as many as the budgets buy."""
        return {inv.device: inv.count if inv.count != "any" else self.budget_bound(inv.device) for inv in self.devices}

    def designed(self) -> tuple[str, ...]:
        """The device ids whose count the solver chooses (``count: any``), in file order."""
        return tuple(inv.device for inv in self.devices if inv.count == "any")

    def budget_bound(self, device_id: str) -> int:
        """The most devices of `device_id` the budgets buy: power budget / the device's rated power on the
        budget's footing (`device_w`) and cost budget / price, whichever is smaller ([Note: fleet design]), and
        at most `MAX_DEVICES`."""
        bounds = []
        if self.power_budget_w is not None:
            bounds.append(self.power_budget_w / self.device_w(device_id))
        price = self.price_per_hour(device_id)
        if self.cost_budget_per_hour is not None and price is not None:
            bounds.append(self.cost_budget_per_hour / price)
        if not bounds:
            i = next(i for i, inv in enumerate(self.devices) if inv.device == device_id)
            raise BadInput(f"cluster {self.name!r}: devices[{i}].count: `any` needs a budget to bound it; set "
                           "power_budget_kw (or --power-budget), or cost_budget_per_hour with a price for "
                           f"{device_id}")
        return min(MAX_DEVICES, int(math.floor(min(bounds) + 1e-9)))

    def device_w(self, device_id: str) -> float:
        """What one device of `device_id` counts against the power budget on its footing ([Note: power basis])."""
        return self.spec_w(registry.device(device_id))

    def spec_w(self, spec: DeviceSpec) -> float:
        """`device_w` of a device already looked up (the registry rebuilds the host CPU's spec on each lookup)."""
        from cost_models.power import device_basis_w

        return device_basis_w(spec, self.power_basis, self.pue_factor)[0]

    @property
    def pue_factor(self) -> float:
        """The PUE the facility footing multiplies by (1 where the file gives none)."""
        return 1.0 if self.pue is None else self.pue

    def price_per_hour(self, device_id: str) -> float | None:
        """Dollars per device-hour: the entry's ``price_per_hour``, else the catalog's reference price, else None."""
        own = self._pool(device_id).price_per_hour
        if own is not None:
            return own
        ref = registry.reference_price(device_id)
        return ref.per_hour if ref is not None else None

    def price_source(self, device_id: str) -> str | None:
        """Where `price_per_hour` comes from: ``cluster file`` or the catalog's labelled source."""
        if self._pool(device_id).price_per_hour is not None:
            return "cluster file"
        ref = registry.reference_price(device_id)
        return f"catalog reference: {ref.source}" if ref is not None else None

    def with_budgets(self, *, power_budget_w: float | None = None,
                     cost_budget_per_hour: float | None = None, calibration: str | None = None) -> Cluster:
        """The same fleet with the budgets and calibration profile a command line overrides (None keeps the
        file's)."""
        update: dict[str, float | str] = {}
        if calibration is not None:
            update["calibration"] = calibration
        if power_budget_w is not None:
            if power_budget_w > MAX_POWER_BUDGET_W:
                raise BadInput(f"power budget {power_budget_w:.3g} W is beyond any site (the largest AI campuses "
                               f"draw a few GW); give at most {MAX_POWER_BUDGET_W / 1e9:.0f}GW, e.g. 200kW")
            update["power_budget_kw"] = power_budget_w / 1e3
        if cost_budget_per_hour is not None:
            update["cost_budget_per_hour"] = cost_budget_per_hour
        return self.model_copy(update=update) if update else self

    def alone(self, device_id: str, budget: Literal["power", "cost"]) -> Cluster:
        """Only `device_id`, as many as one budget buys (``count: any``), the other budget dropped: the fleet an
        iso-power or iso-cost baseline asks about."""
        entry = self._pool(device_id).model_copy(update={"count": "any"})
        keep = {"power_budget_kw": self.power_budget_kw if budget == "power" else None,
                "cost_budget_per_hour": self.cost_budget_per_hour if budget == "cost" else None}
        return self.model_copy(update={"name": f"{self.name}/{budget}:{device_id}", "devices": (entry,),
                                       "links": (), **keep})

    def engine(self, device_id: str) -> str:
        """The serving engine a pool of `device_id` runs (``generic`` unless the file names one)."""
        return self._pool(device_id).engine

    def spec(self, device_id: str) -> DeviceSpec:
        """A pool's device spec (the catalog's, or this host's for ``cpu-host``), without its engine or calibration:
        what counting its watts needs."""
        return registry.device(device_id)

    def served(self, device_id: str) -> ServedDevice:
        """A pool's device type as the cost code reads it: its spec, its engine's costs as measured there and its
        calibration (`compiler.inputs.served`)."""
        return served(device_id, self.engine(device_id), self.calibration)

    def node_size(self, device_id: str) -> int:
        """Devices per node for a pool: the file's ``node_size``, else the catalog's."""
        inv = self._pool(device_id)
        return inv.node_size if inv.node_size is not None else registry.device(device_id).devices_per_node

    def link(self, a: str, b: str) -> tuple[float, float]:
        """``(bandwidth_bytes_per_s, latency_s)`` between pools `a` and `b`, in either order: the aggregate
        of every transfer between them.

        A pair without an entry in ``links`` gets ``default_link``. ``a == b`` is the pool's own fabric: an
        entry between [a, a], else half its devices' NICs at line rate (the most a non-blocking fabric carries
        from the devices that send to the disjoint ones that receive) at one NIC's latency.
        """
        self._pool(a), self._pool(b)
        pair = frozenset((a, b))
        given = next((link for link in self.links if frozenset(link.between) == pair), None)
        if given is None and a == b:
            nic_bw, latency = self.nic(a)
            return max(1, self.inventory()[a] // 2) * nic_bw, latency
        speed: LinkSpeed = given or self.default_link
        return speed.bandwidth_gb_per_s * GB, speed.latency_us / 1e6

    def nic(self, device_id: str) -> tuple[float, float]:
        """``(bandwidth_bytes_per_s, latency_s)`` of one device's own network port: the catalog's scale-out
        link, else ``default_link``. One KV transfer moves no faster than the slower of its two ends' NICs."""
        out = registry.device(device_id).scale_out
        if out is not None:
            return out.bw_bytes_per_s, out.latency_s
        return self.default_link.bandwidth_gb_per_s * GB, self.default_link.latency_us / 1e6

    def entry(self, device_id: str) -> Inventory:
        """The file's entry for a pool: count, node size and how its pods deploy (selector, tolerations, ...)."""
        return self._pool(device_id)

    @property
    def power_budget_w(self) -> float | None:
        return None if self.power_budget_kw is None else self.power_budget_kw * 1e3

    def _pool(self, device_id: str) -> Inventory:
        for inv in self.devices:
            if inv.device == device_id:
                return inv
        raise BadInput(f"cluster {self.name!r} has no {device_id!r} pool; it has {', '.join(self.inventory())}")
