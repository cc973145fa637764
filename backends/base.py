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

from dataclasses import dataclass

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
