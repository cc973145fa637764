"""``gimletc calibrate --device ID`` for an accelerator: measured through torch's device API where the host has one.

This host has no accelerator: the CLI refuses with the path that works here (``--from``), and the measuring and
fitting code runs on torch's CPU device as a stand-in for one (tiny shapes, llama-mini). The test marked
``device`` runs the whole command on a real GPU (skipped without one)."""

from __future__ import annotations

import math

import pytest

from tests.conftest import run_cli


def test_a_device_torch_does_not_see_here_is_refused_with_the_path_that_works():
    proc = run_cli("calibrate", "--device", "amd-mi300x")
    assert proc.returncode == 2
    assert "torch sees no cuda here" in proc.stderr and "calibrate --from" in proc.stderr


@pytest.fixture
def one_thread():
    """torch on one thread: the stand-in device is one core. Two processes' thread pools on two shared cores (the
    suite's workers) stall each other's steps by 3x at random, which no cost model predicts."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_measuring_and_the_fit_run_on_a_stand_in_device_and_predict_held_out_steps(one_thread):
    """On one CPU core with tiny shapes: every microbenchmark row is timed, the copy's bandwidth is its bytes over
    its time, and the decode steps held out of the fit (every other batch) are predicted within 2x of measured:
    within 15% with two such processes here, 1.8x once beside the suite, whose other processes preempt the longest
    steps most (a GPU's steps are far steadier)."""
    from compiler.calibrate.device import TINY, fit, measure

    measured = measure("cpu", "llama-mini", TINY, lambda _m: None)
    rows = measured["rows"]
    assert len(rows["linear"]) == 5 * len(TINY.tokens) and len(rows["decode"]) == len(TINY.decode_batches)
    assert all(r["time_s"] > 0 for kind in ("linear", "attention", "memory", "dispatch") for r in rows[kind])
    report = fit("cpu-host", "llama-mini", measured)
    copy = rows["memory"][0]
    assert copy["bytes"] == 2 * TINY.copy_mib * 2**20  # read and written: bf16 elements of 2 bytes
    assert 0 < report["derate"]["compute_eff"] <= 1 and 0 < report["derate"]["mem_eff"] <= 1
    assert report["derate"]["op_overhead_s"] == rows["dispatch"][0]["time_s"]
    held = [r for r in report["decode"] if r["held_out"]]
    assert held and all(0.5 < r["predicted_s"] / r["time_s"] < 2.0 for r in held), \
        [(r["batch"], r["time_s"], r["predicted_s"]) for r in held]
    assert all(math.isfinite(r["predicted_s"]) for r in report["linear"] + report["attention"])


#: A visible GPU's name, as torch reports it, to the catalog id it is.
GPU_IDS = {"H100": "nvidia-h100-sxm", "H200": "nvidia-h200-sxm", "B200": "nvidia-b200", "MI300X": "amd-mi300x",
           "MI325X": "amd-mi325x", "MI355X": "amd-mi355x"}


@pytest.mark.device
@pytest.mark.timeout(1800)
def test_calibrate_a_real_gpu_and_predict_its_held_out_decode_steps(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU here")
    name = torch.cuda.get_device_name(0)
    device = next((v for k, v in GPU_IDS.items() if k in name), None)
    if device is None:
        pytest.skip(f"{name} is not in the catalog map of this test")
    monkeypatch.setenv("GIMLETC_CACHE_DIR", str(tmp_path / "cache"))
    proc = run_cli("calibrate", "--device", device, "--json", timeout=1700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    report = json.loads(proc.stdout)
    held = [r for r in report["decode"] if r["held_out"]]
    errors = sorted(abs(r["predicted_s"] / r["time_s"] - 1) for r in held)
    assert errors[len(errors) // 2] < 0.25, report["decode"]
