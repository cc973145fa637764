"""`gimletc backends`: catalog rows as JSON and the rendered table."""

from __future__ import annotations

import io
import json

from rich.console import Console

from backends import registry
from backends.catalog import catalog_rows
from compiler.cli.backends import render as print_catalog


def rows_by_id() -> dict[str, dict]:
    return {r["id"]: r for r in catalog_rows(registry.all_devices())}


def test_rows_are_json_and_one_per_device():
    rows = catalog_rows(registry.all_devices())
    assert [r["id"] for r in rows] == [d.id for d in registry.all_devices()]
    assert json.loads(json.dumps(rows)) == rows


def test_rows_carry_datasheet_units():
    rows = rows_by_id()
    h100 = rows["nvidia-h100-sxm"]
    assert h100["peak_tflops"]["bf16"] == 989
    assert h100["memory"] == [{"tier": "hbm", "capacity_gb": 80, "bw_tb_per_s": 3.35}]
    assert h100["scale_up"]["gb_per_s"] == 450 and h100["scale_up"]["domain_devices"] == 8
    assert h100["k8s_resource"] == "nvidia.com/gpu"
    assert [t["tier"] for t in rows["dmatrix-corsair"]["memory"]] == ["sram", "dram"]
    assert "bf16" not in rows["dmatrix-corsair"]["peak_tflops"]


def test_rows_say_what_is_assumed_and_how_it_runs():
    rows = rows_by_id()
    cs3 = rows["cerebras-cs3"]
    assert cs3["k8s_resource"] is None and cs3["k8s_note"]
    assert cs3["scale_up"] is None
    assert "peak_flops_per_s.bf16" in cs3["assumed"]
    assert cs3["sources"]["peak_flops_per_s.bf16"].startswith("assumption:")
    assert "memory.sram.capacity_bytes" not in cs3["assumed"]
    assert rows["aws-trn2"]["execution"] == "emulated"
    assert {r["execution"] for r in rows.values()} <= {"native", "emulated"}


def test_table_fits_140_columns_and_names_every_device():
    out = io.StringIO()
    rows = catalog_rows(registry.all_devices())
    print_catalog(rows, Console(file=out, width=140, color_system=None))
    text = out.getvalue()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 140
    for r in rows:
        assert r["id"] in text
    assert "datasheet" in text and "not measurements" in text
    assert "appliance" in text  # why Cerebras has no Kubernetes resource
