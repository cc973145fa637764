"""What ``gimletc backends`` reports: the device catalog, one JSON-able row per device.

Every number is a vendor datasheet peak (dense FLOP/s, memory, power, links)
or a labelled assumption, never a measurement and never derated; ``sources``
says which, per number. `catalog_rows` builds the rows and `print_catalog`
renders them as a table, so ``--json`` and the table never disagree.

Row keys: ``id``, ``vendor``, ``product``, ``family``, ``form`` (chip, card or
system), ``peak_tflops`` (dense TFLOPS per dtype; TOPS for int8), ``memory``
(tiers fastest first: ``tier``, ``capacity_gb``, ``bw_tb_per_s``), ``tdp_w``,
``idle_w``, ``devices_per_node``, ``scale_up`` and ``scale_out`` (null or
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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from backends.registry import backend_of
from compiler.ir.device_spec import DeviceSpec, Link

if TYPE_CHECKING:
    from rich.console import Console

#: Dtypes the table shows; the JSON rows carry every dtype a device publishes.
TABLE_DTYPES = ("bf16", "fp8", "fp4")


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
            "tdp_w": d.tdp_w, "idle_w": d.idle_w, "devices_per_node": d.devices_per_node,
            "scale_up": _link_row(d.scale_up), "scale_out": _link_row(d.scale_out),
            "k8s_resource": d.k8s_resource, "k8s_note": d.k8s_note,
            "torch_device": d.torch_device, "execution": backend_of(d).execution(d),
            "software": d.software, "image": d.image,
            "sources": sources,
            "assumed": sorted(k for k in d.numbers() if sources.get(k, "").startswith("assumption:")),
        })
    return rows


def _num(value: float | None) -> str:
    """Compact number: 989, 1.56, 0.864, 62.5k."""
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _memory_cell(tiers: list[dict[str, Any]]) -> str:
    """One line per tier: ``hbm 80@3.35`` (GB @ TB/s)."""
    return "\n".join(f"{t['tier']} {_num(t['capacity_gb'])}@{_num(t['bw_tb_per_s'])}" for t in tiers)


def _link_cell(link: dict[str, Any] | None) -> str:
    if link is None:
        return "-"
    domain = link["domain_devices"]
    return f"{_num(link['gb_per_s'])} x{domain}" if domain < 1 << 16 else _num(link["gb_per_s"])


def print_catalog(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """Render `rows` as one table (about 140 columns) with footnotes; `console` defaults to stdout."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    table = Table(title="Device catalog: vendor datasheet peaks (dense, not derated), not measurements",
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 0, 0, 1))
    columns = (("device", "left"), ("form", "left"), ("TFLOPS\n" + "/".join(TABLE_DTYPES), "right"),
               ("memory\nGB@TB/s", "left"), ("TDP\nW", "right"), ("per\nnode", "right"),
               ("scale-up\nGB/s xN", "right"), ("scale-out\nGB/s", "right"), ("k8s resource", "left"),
               ("run", "left"), ("assumed", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for r in rows:
        table.add_row(
            escape(r["id"]), r["form"], "/".join(_num(r["peak_tflops"].get(d)) for d in TABLE_DTYPES),
            _memory_cell(r["memory"]), _num(r["tdp_w"]), str(r["devices_per_node"]), _link_cell(r["scale_up"]),
            _link_cell(r["scale_out"]), escape(r["k8s_resource"] or "none"), r["execution"],
            f"{len(r['assumed'])}/{len(r['sources'])}",
        )
    console.print(table)
    for r in rows:
        if r["k8s_resource"] is None:
            console.print(f"{r['id']}: no k8s resource ({r['k8s_note']})", style="dim", markup=False)
    console.print("Memory tiers fastest first; links per device, one direction, xN = devices the link joins. "
                  "'assumed': numbers whose source is a labelled assumption, of all numbers (--json lists every "
                  "source). 'run': native where this host has the device's torch backend, else emulated on the host "
                  "CPU.", style="dim")
