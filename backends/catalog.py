"""What ``gimletc backends`` reports: the device catalog, one JSON-able row per device.

Every number is a vendor datasheet peak (dense FLOP/s, memory, power, links)
or a labelled assumption, never a measurement and never derated; ``sources``
says which, per number. 
Row keys: ``id``, ``vendor``, ``product``, ``family``, ``form`` (chip, card or
system), ``peak_tflops`` (dense TFLOPS per dtype; TOPS for int8), ``memory``
(tiers fastest first: ``tier``, ``capacity_gb``, ``bw_tb_per_s``), ``tdp_w``,
``idle_w``, ``node_w`` (wall power of its deployable unit per device: the
accelerator plus its share of the host, NICs, switches and fans) with
``node_w_label`` (measured, specified or assumed), ``devices_per_node``, ``scale_up`` and ``scale_out`` (null or
``name``, ``gb_per_s`` one direction per device, ``latency_us``,
``domain_devices``), ``k8s_resource`` (null where no public device plugin
exists), ``k8s_note``, ``torch_device``, ``execution`` (``native`` or
``emulated`` on this host), ``software``, ``image``, ``sources`` (number key ->
URL or ``assumption: ...``) and ``assumed`` (the number keys whose source is
an assumption). Units are decimal (GB = 1e9 bytes).

>>> from backends.registry import device
>>> row = catalog_rows([device("nvidia-h100-sxm")])[0]
>>> row["peak_tflops"]["bf16"], row["memory"][0]["bw_tb_per_s"], row["k8s_resource"]
(989.0, 3.35, 'nvidia.com/gpu')
>>> row["tdp_w"], row["node_w"], row["node_w_label"]   # a DGX H100's 10.2 kW over its 8 GPUs
(700, 1275.0, 'specified')
"""

from __future__ import annotations

from typing import Any, Iterable

from backends.registry import backend_of
from compiler.ir.device_spec import DeviceSpec, Link


def _link_row(link: Link | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {"name": link.name, "gb_per_s": link.bw_bytes_per_s / 1e9, "latency_us": link.latency_s * 1e6,
            "domain_devices": link.domain_devices}


def catalog_rows(devices: Iterable[DeviceSpec]) -> list[dict[str, Any]]:
    """One JSON-able dict per device, in the given order."""
    rows = []
    for d in devices:
        sources = dict(d.sources)
        rows.append({
            "id": d.id, "vendor": d.vendor, "product": d.product, "family": d.family, "form": d.form,
            "peak_tflops": {dtype: flops / 1e12 for dtype, flops in d.peak_flops_per_s},
            "memory": [{"tier": t.name, "capacity_gb": t.capacity_bytes / 1e9, "bw_tb_per_s": t.bw_bytes_per_s / 1e12}
                       for t in d.memory],
            "tdp_w": d.tdp_w, "idle_w": d.idle_w, "node_w": d.node_w, "node_w_label": d.node_w_label or "assumed",
            "devices_per_node": d.devices_per_node,
            "scale_up": _link_row(d.scale_up), "scale_out": _link_row(d.scale_out),
            "k8s_resource": d.k8s_resource, "k8s_note": d.k8s_note,
            "torch_device": d.torch_device, "execution": backend_of(d).execution(d),
            "software": d.software, "image": d.image,
            "sources": sources,
            "assumed": sorted(k for k in d.claims() if sources.get(k, "").startswith("assumption:")),
        })
    return rows
