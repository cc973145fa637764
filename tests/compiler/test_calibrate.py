"""`gimletc calibrate`: what it saves, that the rest of the compiler reads it back, and the fit.

Timings are only checked for sanity (positive, finite): the machine running
the tests may be busy. The fit is checked on synthetic block times made by
`block_time` with a known derate.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from compiler.ir.errors import BadInput


@pytest.fixture(scope="module")
def quick(tmp_path_factory, tiny_graph):
    """A quick calibration saved into a fresh cache folder (holding a copy of the session's traces)."""
    from compiler.calibrate import calibrate

    tiny_graph("llama-tiny")  # traced once into the session cache; copied so calibrate need not re-trace
    cache = tmp_path_factory.mktemp("calibration-cache")
    shutil.copytree(Path(os.environ["GIMLETC_CACHE_DIR"]) / "traces", cache / "traces")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GIMLETC_CACHE_DIR", str(cache))
        notes: list[str] = []
        report = calibrate("cpu-host", progress=notes.append, quick=True)
        yield report, cache, notes


def test_quick_calibration_is_saved_and_read_back(quick):
    from backends.cpu import host_device
    from compiler.ir.calibration import load_calibration
    from compiler.ir.files import calibration_path
    from cost_models.derates import derate_for

    report, cache, notes = quick
    path = calibration_path("cpu-host")
    assert path == cache / "calibration" / "cpu-host.json"
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["device"] == "cpu-host" and saved["family"] == "cpu" and saved["quick"] is True
    assert notes, "progress was never reported"

    device = host_device()
    assert device.peak("fp32") == report["peak_flops_per_s"]["fp32"] > 0
    assert device.memory[0].bw_bytes_per_s == report["mem_bw_bytes_per_s"] > 0
    for key in ("peak_flops_per_s.fp32", "memory.dram.bw_bytes_per_s"):
        assert device.source(key).startswith("measured:"), key

    derate = derate_for("cpu", load_calibration("cpu-host"))
    assert derate.provenance.startswith("measured:")
    for key, value in report["derate"].items():
        assert getattr(derate, key) == value
        assert math.isfinite(value) and value >= 0
    for key in ("compute_eff", "mem_eff", "vector_eff", "elementwise_traffic"):
        assert 0 < report["derate"][key] <= 1


def test_the_fitted_block_times_predict_the_held_out_measurements(quick, tiny_graph):
    """Every block of llama-tiny is measured in both phases, some points held out of the fit. Measured, not
    recomputed: the fitted cost model predicts the held-out block times within 50% at the median (4% and 13% in two
    quiet runs here, 2026-12-07; the suite's other processes share the two cores) and each within 5x, so a fit
    off by a unit or a derate that does not reach the costing fails."""
    import statistics

    report, _, _ = quick
    graph = tiny_graph("llama-tiny")
    rows = report["stage_errors"]
    assert {r["phase"] for r in rows} == {"prefill", "decode"}
    assert {r["held_out"] for r in rows} == {True, False}
    assert {r["block"] for r in rows} == {b.name for b in graph.blocks}
    held = [r for r in rows if r["held_out"]]
    for r in held:
        assert r["measured_s"] > 0 and math.isfinite(r["measured_s"])
        assert 1 / 5 < r["predicted_s"] / r["measured_s"] < 5, r
    assert statistics.median(abs(r["predicted_s"] / r["measured_s"] - 1) for r in held) < 0.5, held
    for key, value in report["summary"].items():
        assert math.isfinite(value), key


def test_print_calibration_shows_errors_and_derate(quick):
    from rich.console import Console

    from compiler.cli.calibrate import print_calibration

    report, _, _ = quick
    out = io.StringIO()
    print_calibration(report, console=Console(file=out, width=200))
    text = out.getvalue()
    for needle in ("held out", "median |error|", "compute_eff", "op_overhead_s", "L0.attn", "GFLOP/s"):
        assert needle in text, needle


@pytest.mark.parametrize("device_id", ["h100-sxm", "cpu", "CPU-HOST", ""])
def test_only_the_host_can_be_calibrated(device_id, tmp_path, monkeypatch):
    from compiler.calibrate import calibrate

    monkeypatch.setenv("GIMLETC_CACHE_DIR", str(tmp_path))
    with pytest.raises(BadInput) as err:
        calibrate(device_id, quick=True)
    assert repr(device_id) in str(err.value) and "only 'cpu-host'" in str(err.value)
    assert not (tmp_path / "calibration").exists()


def _synthetic_device():
    from compiler.ir.device_spec import DeviceSpec, MemoryTier

    return DeviceSpec("cpu-test", "host", "test CPU", "cpu", "chip", (("fp32", 100e9),),
                      (MemoryTier("dram", 16e9, 20e9),), 20, 4, 1, None, None, "cpu")


def test_overheads_are_recovered_exactly_from_linear_data():
    import numpy as np

    from compiler.calibrate.fit import robust_overheads

    roof = np.array([1e-4, 3e-4, 2e-3, 5e-5, 7e-4])
    ops = np.array([10.0, 25.0, 14.0, 9.0, 30.0])
    measured = roof + 40e-6 + 6e-6 * ops
    block_s, op_s = robust_overheads(roof, ops, measured)
    assert block_s == pytest.approx(40e-6, rel=1e-3) and op_s == pytest.approx(6e-6, rel=1e-3)
    # One wild point does not move a robust fit much.
    measured[2] *= 3
    block_s, op_s = robust_overheads(roof, ops, measured)
    assert block_s == pytest.approx(40e-6, rel=0.1) and op_s == pytest.approx(6e-6, rel=0.1)
    # A negative best intercept is pinned at zero, not returned.
    block_s, op_s = robust_overheads(roof, ops, roof + 6e-6 * ops - 1e-6)
    assert block_s == 0.0 and op_s > 0


def test_fit_reproduces_block_times_made_with_a_known_derate(tiny_graph):
    from compiler.calibrate.host import Case, fit_host_derate, predict_s
    from cost_models.derates import DERATES, Derate

    graph, device = tiny_graph("llama-tiny"), _synthetic_device()
    truth = Derate(compute_eff=0.25, mem_eff=0.5, vector_eff=0.05, elementwise_traffic=0.5,
                   block_overhead_s=30e-6, op_overhead_s=7e-6)
    points = {"prefill": [{"B": b, "S": s} for b, s in ((1, 64), (4, 256), (16, 1024))],
              "decode": [{"B": b, "L": n} for b, n in ((1, 64), (64, 4096))]}
    cases = [Case(block, point, 0.0) for block in graph.blocks for point in points[block.phase]]
    cases = [replace(c, measured_s=predict_s(c, device, truth)) for c in cases]
    start = replace(DERATES["cpu"], op_overhead_s=1e-6)
    fitted = fit_host_derate(cases, device, start)
    for c in cases:
        assert predict_s(c, device, fitted) == pytest.approx(c.measured_s, rel=1e-3)
    # vector_eff is not identifiable here: elementwise ops are memory-bound at any plausible value.
    for key in ("compute_eff", "mem_eff", "elementwise_traffic", "op_overhead_s", "block_overhead_s"):
        assert getattr(fitted, key) == pytest.approx(getattr(truth, key), rel=0.01), key


class _FakeHost:
    """Scripted host for `QuietGate`: jobs made by `job` charge other-process ticks; canary times are queued."""

    def __init__(self, monkeypatch, *, other_ticks_per_segment=(), canary_s=()):
        import compiler.calibrate.quiet_timing as cal

        self.other = list(other_ticks_per_segment)
        self.canary = list(canary_s)
        self.busy = 0
        monkeypatch.setattr(cal.HostLoad, "read", staticmethod(lambda: cal.HostLoad(0.0, self.busy, 0)))
        monkeypatch.setattr(cal, "_canary_s", lambda: self.canary.pop(0) if self.canary else 1e-4)
        monkeypatch.setattr(cal.time, "sleep", lambda _s: None)

    def job(self, fn):
        def run():
            self.busy += self.other.pop(0) if self.other else 0
            return fn()
        return run


def test_gate_repeats_segments_that_ran_beside_other_processes(monkeypatch):
    from compiler.calibrate.quiet_timing import QuietGate

    host = _FakeHost(monkeypatch, other_ticks_per_segment=[50, 50, 0, 0])
    runs = []
    gate = QuietGate(wait_budget_s=60.0, note=lambda _m: None)
    out = gate.run({"a": host.job(lambda: runs.append("a") or [2.0]),
                    "b": host.job(lambda: runs.append("b") or [3.0])})
    assert out == {"a": [2.0], "b": [3.0]}
    assert runs == ["a", "a", "a", "b"] and gate.rejected == 2 and gate.contended == 0


def test_gate_keeps_contended_segments_once_the_wait_budget_is_spent(monkeypatch):
    from compiler.calibrate.quiet_timing import QuietGate

    host = _FakeHost(monkeypatch, other_ticks_per_segment=[50] * 100)
    gate = QuietGate(wait_budget_s=0.5, note=lambda _m: None)
    assert gate.run({"a": host.job(lambda: [1.0])}) == {"a": [1.0]}
    assert gate.contended == 1 and gate.rejected == 2 and gate.wait_left_s <= 0


def test_gate_reruns_segments_measured_before_the_host_was_seen_at_full_speed(monkeypatch):
    from compiler.calibrate.quiet_timing import QuietGate

    # Two canaries (before, after) per segment: "a" runs slow, "b" reveals the host's real speed.
    host = _FakeHost(monkeypatch, canary_s=[2e-4, 2e-4, 1e-4, 1e-4, 1e-4, 1e-4])
    times = {"a": [[5.0], [4.0]], "b": [[1.0]]}
    gate = QuietGate(wait_budget_s=60.0, note=lambda _m: None)
    out = gate.run({key: host.job(lambda key=key: times[key].pop(0)) for key in times})
    assert out == {"a": [4.0], "b": [1.0]} and gate.rerun == 1


def test_a_saved_report_fits_again_and_follows_its_measurements(quick):
    """A report holds its measurements, and `tools/bench_calibrate.py --from` fits them again. Oracle: the
    measurements themselves, made twice as slow: every block time doubled (the microbenchmarks, and so the
    peaks, kept), the refitted derate predicts the held-out blocks about twice as slow as the first fit did
    (1.6-2.5x at the median; the fit's bounds and its start leave it short of exactly 2). A fitter that ignored
    what it read, or read other fields than the measured times, predicts them unchanged."""
    from compiler.calibrate.host import fit_report
    from compiler.calibrate.measure import Measurements

    report, _, _ = quick
    slower = json.loads(json.dumps(report))
    for row in slower["stage_errors"]:
        row["measured_s"] *= 2
    again = fit_report(Measurements.from_report(slower), lambda _m: None, quick=True)
    ratios = [a["predicted_s"] / b["predicted_s"] for a, b in zip(again["stage_errors"], report["stage_errors"])
              if b["held_out"]]
    assert ratios and 1.6 <= statistics.median(ratios) <= 2.5, sorted(ratios)