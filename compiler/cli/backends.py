"""``gimletc backends``: the device catalog as a table (or the rows as JSON)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from compiler.cli import options
from compiler.cli.console import fitted_tables, output

if TYPE_CHECKING:
    from rich.console import Console

#: Dtypes the table shows; the JSON rows carry every dtype a device publishes.
TABLE_DTYPES = ("bf16", "fp8", "fp4")
NODE_LABEL_MARK = {"specified": " s", "measured": " m", "assumed": " a"}  # how the node power is known


def register(sub) -> None:
    p = sub.add_parser("backends", help="list the device catalog (datasheet numbers with sources)",
                       description="List every device of every backend: dense peak FLOP/s per dtype, memory tiers, "
                                   "power, links, Kubernetes resource and how a stage executes on this host.")
    options.add_json(p, "the catalog")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backends.catalog import catalog_rows
    from backends.registry import all_devices

    return output(catalog_rows(all_devices()), args.json, render)


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


def render(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """Render `rows` as one table (about 140 columns; split in parts on a narrower terminal, device ids whole)
    with footnotes; `console` defaults to stdout."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape

    console = console or Console()
    columns = [("device", "left"), ("form", "left"), ("TFLOPS\n" + "/".join(TABLE_DTYPES), "right"),
               ("memory\nGB@TB/s", "left"), ("TDP\nW", "right"), ("node W\n/device", "right"),
               ("per\nnode", "right"),
               ("scale-up\nGB/s xN", "right"), ("scale-out\nGB/s", "right"), ("k8s resource", "left"),
               ("run", "left"), ("assumed", "right")]
    cells = [[escape(r["id"]), r["form"], "/".join(_num(r["peak_tflops"].get(d)) for d in TABLE_DTYPES),
              _memory_cell(r["memory"]), _num(r["tdp_w"]),
              f"{_num(r['node_w'])}{NODE_LABEL_MARK[r['node_w_label']]}", str(r["devices_per_node"]),
              _link_cell(r["scale_up"]),
              _link_cell(r["scale_out"]), escape(r["k8s_resource"] or "none"), r["execution"],
              f"{len(r['assumed'])}/{len(r['sources'])}"] for r in rows]
    title = "Device catalog: vendor datasheet peaks (dense, not derated), not measurements"
    for table in fitted_tables(title, columns, cells, console.width, box=box.SIMPLE_HEAD, show_edge=False,
                               pad_edge=False, padding=(0, 0, 0, 1)):
        console.print(table)
    for r in rows:
        if r["k8s_resource"] is None:
            console.print(f"{r['id']}: no k8s resource ({r['k8s_note']})", style="dim", markup=False)
    console.print("TDP: the accelerator's rated power (a CS-3: the whole system); node W/device: the wall power of "
                  "the unit it deploys in, per device (host CPUs, NICs, switches, fans included), what a power "
                  "budget counts by default (power_basis: node); s = from a system datasheet, m = measured, "
                  "a = assumed.", style="dim")
    console.print("Memory tiers fastest first; links per device, one direction, xN = devices the link joins. "
                  "'assumed': numbers whose source is a labelled assumption, of all numbers (--json lists every "
                  "source). 'run': native where this host has the device's torch backend, else emulated on the host "
                  "CPU.", style="dim")
