"""Prediction intervals ([Note: prediction intervals] in compiler/ir/prediction.py): the spreads shipped in
cost_models/spreads.py are what the leave-one-out residuals give, and about 80% of measured rows fall inside the
80% interval computed without them.

The residuals (cost_models/data/loo_residuals.csv) are each measured row predicted by a fit that never saw it
(`tools/intervals.py`); the coverage check leaves each row's own group out of its interval too, so an interval
computed from residuals that are too small (an in-sample fit) or a spread that is too narrow fails it."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest

from compiler.ir.prediction import T90, Spread
from cost_models.spreads import SPREADS, Residual, spread_for, table

RESIDUALS = Path(__file__).resolve().parents[2] / "cost_models" / "data" / "loo_residuals.csv"


def residuals() -> list[Residual]:
    with open(RESIDUALS, newline="") as f:
        return [Residual(**{k: (float(v) if k in ("measured", "predicted") else v) for k, v in row.items()})
                for row in csv.DictReader(f)]


def coverage(rows: list[Residual], shrink: float = 1.0) -> list[tuple[Residual, bool]]:
    """Each row against its kind's spread computed without its group; `shrink` scales every log residual the
    spreads are computed from (below 1: intervals too narrow)."""
    out, cache = [], {}
    scaled = [Residual(r.basis, r.scope, r.metric, r.group, r.row, r.family, r.device, r.engine,
                       r.predicted * math.exp(shrink * r.log_ratio), r.predicted) for r in rows]
    for r in rows:
        if r.group not in cache:
            cache[r.group] = table(scaled, leave_out=r.group)
        s = cache[r.group].get(r.key)
        out.append((r, s is not None and s.lo <= r.measured / r.predicted <= s.hi))
    return out


def test_the_shipped_spreads_are_what_the_residuals_give():
    """cost_models/spreads.py's table is `table` of the residual file, to the 4 digits it is written with."""
    fresh = table(residuals())
    assert set(fresh) == set(SPREADS)
    for k, s in fresh.items():
        shipped = SPREADS[k]
        assert (shipped.rows, shipped.groups, shipped.basis) == (s.rows, s.groups, s.basis)
        assert shipped.lo == pytest.approx(s.lo, rel=1e-3)
        assert shipped.hi == pytest.approx(s.hi, rel=1e-3) if s.bounded else not shipped.bounded


def test_about_80_percent_of_rows_fall_inside_intervals_computed_without_them():
    """Over every residual: between 70% and 90% inside (the acceptance band of an 80% interval); over each basis at
    least 70%, and at most 95% where few groups pin it (the unseen devices' spreads rest on 6-7 devices: a t
    interval, wide on purpose). Too narrow a spread (the residuals halved, as an in-sample fit's would be) falls
    below 70%."""
    rows = residuals()
    cov = coverage(rows)
    share = lambda items: sum(inside for _r, inside in items) / len(items)  # noqa: E731
    assert 0.70 <= share(cov) <= 0.90
    for basis in sorted({r.basis for r in rows}):
        part = [c for c in cov if c[0].basis == basis]
        assert 0.70 <= share(part) <= 0.95, f"{basis}: {share(part):.0%} of {len(part)} rows inside"
    assert share(coverage(rows, shrink=0.5)) < 0.70


def test_a_t_interval_for_few_rows_by_hand():
    """Four residuals 0.9, 1.0, 1.1, 1.2: logs -0.1054, 0, 0.0953, 0.1823; median 0.0477, mean 0.0431, sample
    standard deviation sqrt(0.04601 / 3) = 0.1238; t(0.9, 3 dof) 1.638; half-width 1.638 x 0.1238 x sqrt(1 + 1/4)
    = 0.2268: exp(0.0477 -+ 0.2268) = 0.836 .. 1.316. Fewer than two rows: unbounded."""
    logs = [math.log(x) for x in (0.9, 1.0, 1.1, 1.2)]
    s = Spread.from_log_residuals(logs, "four")
    mid, sd = statistics.median(logs), statistics.stdev(logs)
    assert sd == pytest.approx(0.1238, abs=1e-4) and T90[2] == 1.638
    assert s.lo == pytest.approx(0.836, abs=1e-3) and s.hi == pytest.approx(1.316, abs=1e-3)
    assert mid == pytest.approx(0.0477, abs=1e-4)
    assert not Spread.from_log_residuals([0.1], "one").bounded


def test_each_device_reads_the_basis_that_measured_it():
    """A Hopper GPU under a sweeps engine: the sweeps' spread of that engine; the MI300X: the AMD family's rows; the
    MI355X (no row of its own): the unseen-device spread, wider than its family's; d-Matrix (fitted on nothing):
    the assumed spread; a host whose engine was never measured: unbounded."""
    h100 = spread_for("nvidia-h100-sxm", "nvidia", "vllm", "tpot")
    assert h100.basis.startswith("measured serving sweeps of TensorRT-LLM, vLLM and SGLang")
    mi300x, mi355x = spread_for("amd-mi300x", "amd", "vllm", "tpot"), spread_for("amd-mi355x", "amd", "vllm", "tpot")
    assert mi300x.basis.startswith("published amd") and mi355x.basis.startswith("devices with no measurement")
    assert spread_for("dmatrix-corsair", "dmatrix", "generic", "tpot").basis.startswith("families no measurement")
    assert not spread_for("cpu-host", "cpu", "vllm", "tpot").bounded
    for s in (h100, mi300x, mi355x):
        assert 0 < s.lo < 1 < s.hi < 10
    assert mi355x.width > mi300x.width
