"""What every backend provides; defaults live here so a new backend is one small file.

A backend is one accelerator family. It declares its devices (`DeviceSpec`
data with sources), how a stage executes on this host (``native`` when the
torch device exists, else ``emulated`` on the host CPU with identical numerics
and predicted timings) and how it deploys (Kubernetes resource, image, launch
command). Checks return a list of reasons, empty when fine.

To add a backend: subclass `Backend` in one module, set ``family`` and
``devices``, and either add the module to `backends.registry.BUILTIN` or
expose it through the ``gimletc.backends`` entry-point group (see
tests/backends/test_registry.py for a dummy out-of-tree plugin).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.ir.device_spec import DeviceSpec
from compiler.ir.engine_platform import EnginePlatform
from cost_models.roofline import compute_peak


@dataclass(frozen=True, slots=True)
class ReferencePrice:
    """A labelled reference rental price of one device: dollars per device-hour and where it comes from (a URL
    with the offer it quotes, or ``assumption: ...``). Prices are market data, not hardware facts: a cluster
    file's ``price_per_hour`` overrides them, and a placement only reads them for a cost budget or objective."""

    device: str
    per_hour: float
    source: str


# [Note: node power shares] Where a vendor publishes a system's maximum input power, a device's node power is
# that figure over the system's devices ([Note: power footing] in compiler/ir/device_spec.py). Where none is
# published, a family takes the host share per device of the nearest published system of the same build:
DGX_H100_W = 10_200  # DGX H100/H200: "~10.2 kW max" system power usage for 8 x 700 W GPUs
DGX_H100_SOURCE = ("https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html (DGX H100/H200 "
                   "system power usage ~10.2 kW max, 8 GPUs)")
#: Host share per accelerator of an 8-way baseboard server (two host CPUs, a 400G NIC per accelerator, switches,
#: fans, PSU losses): DGX H100's 10.2 kW less its 8 x 700 W GPUs, over 8 = 575 W.
HGX_HOST_W_PER_DEVICE = (DGX_H100_W - 8 * 700) / 8
HGX_HOST_RULE = (f"assumption: no system power published; the accelerator's rated power plus the host share per "
                 f"GPU of a DGX H100 ({DGX_H100_W} W less 8 x 700 W GPUs, over 8 = {HGX_HOST_W_PER_DEVICE:.0f} W; "
                 f"{DGX_H100_SOURCE}), the nearest published 8-way baseboard server")
DGX_A100_W = 6_500  # DGX A100: "6.5 kW max" for 8 x 400 W GPUs
DGX_A100_SOURCE = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-dgx-a100-datasheet.pdf "
                   "(DGX A100 system power usage 6.5 kW max, 8 GPUs)")
#: Host share per card of an 8-card PCIe server: DGX A100's 6.5 kW less 8 x 400 W, over 8 = 412.5 W (it includes
#: NVSwitches a PCIe server lacks, so an upper bound).
PCIE_HOST_W_PER_DEVICE = (DGX_A100_W - 8 * 400) / 8
PCIE_HOST_RULE = (f"assumption: no server power published; the card's rated power plus the host share per GPU of "
                  f"a DGX A100 ({DGX_A100_W} W less 8 x 400 W, over 8 = {PCIE_HOST_W_PER_DEVICE:.1f} W; "
                  f"{DGX_A100_SOURCE}), an upper bound for a PCIe server without NVSwitches")


def on_node(spec: DeviceSpec, node_w_per_device: float, label: str, source: str) -> DeviceSpec:
    """`spec` with the wall power of its deployable unit per device, labelled ``measured``, ``specified`` or
    ``assumed``, and its source ([Note: power footing])."""
    if label not in ("measured", "specified", "assumed"):
        raise ValueError(f"{spec.id}: node power label {label!r} is not measured, specified or assumed")
    return replace(spec, node_w_per_device=float(node_w_per_device), node_w_label=label,
                   sources=tuple(sorted({**dict(spec.sources), "node_w_per_device": source}.items())))


def hgx_node(spec: DeviceSpec) -> DeviceSpec:
    """An 8-way baseboard accelerator whose system power is unpublished: its rated power + the DGX H100 host share."""
    return on_node(spec, spec.tdp_w + HGX_HOST_W_PER_DEVICE, "assumed", HGX_HOST_RULE)


def pcie_node(spec: DeviceSpec) -> DeviceSpec:
    """A card in a PCIe server whose power is unpublished: its rated power + the DGX A100 host share."""
    return on_node(spec, spec.tdp_w + PCIE_HOST_W_PER_DEVICE, "assumed", PCIE_HOST_RULE)


class Backend:
    family: str = ""
    devices: tuple[DeviceSpec, ...] = ()
    prices: tuple[ReferencePrice, ...] = ()  # reference prices of some of `devices` (none required)
    engines: tuple[EnginePlatform, ...] = ()  # serving engines its devices run, the default first

    def execution(self, device: DeviceSpec) -> str:
        """``native`` if this host has the device's torch backend, else ``emulated``."""
        if device.torch_device is None:
            return "emulated"
        try:
            import torch
        except ImportError:
            return "emulated"
        module = getattr(torch, device.torch_device, None)
        available = getattr(module, "is_available", None)
        return "native" if device.torch_device == "cpu" or (callable(available) and available()) else "emulated"

    def unsupported_reasons(self, device: DeviceSpec, dtype: str) -> list[str]:
        """Why `device` cannot run a stage whose weights are `dtype`; empty if it can.

        A device runs narrower weights than it computes at (weight-only quantisation, see
        `cost_models.roofline.COMPUTE_FALLBACK`), but never wider ones: d-Matrix's block-floating-point
        Corsair publishes no bf16 rate at all.
        """
        try:
            compute_peak(device, dtype)
        except ValueError:
            return [f"{device.id} has no published {dtype} throughput, nor a wider dtype to compute it at "
                    f"(supports {', '.join(device.dtypes)})"]
        return []

    def launch_command(self, device: DeviceSpec) -> list[str]:
        """Command a stage worker container runs (the same worker program everywhere)."""
        return ["python", "-m", "compiler.runtime.worker"]
