"""The sweep fitter's (compiler/fidelity/sweeps.py) held-out folds: what a fold may fit on, and how a device it never saw is costed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler.fidelity import sweeps as fs
from compiler.fidelity import sweeps_report as report


def _row(i: int, device: str = "nvidia-h100-sxm") -> dict:
    return {"id": f"r{i}", "model": "llama-3.1-8b", "device": device, "backend": "vllm", "backend_version": "0.18.0",
            "gemm_quant": ""}


def test_a_fold_refuses_to_predict_a_row_it_fits_on():
    """The fitter refuses a row it is asked to predict: by index, and by id where a file repeats a row."""
    rows = [_row(0), _row(1), _row(2), dict(_row(1), device="nvidia-h200-sxm")]
    with pytest.raises(ValueError, match="held-out row is among the fitting rows"):
        fs.fold(rows, {}, [0, 1], [1, 2])
    with pytest.raises(ValueError, match="held-out row is among the fitting rows"):
        fs.fold(rows, {}, [0, 1], [3])  # the same id under another device


def test_a_device_the_fit_never_saw_runs_at_its_family_mates_efficiencies():
    """Leave one device out: the H200 held out gets the fitted H100's efficiencies (its only NVIDIA mate); with two
    mates, the median of each field; a device of a family without fitted mates, its family derate's."""
    from cost_models.derates import DERATES

    h100 = (0.8, 0.9, 0.5)
    assert fs.family_kernels("nvidia-h200-sxm", {"nvidia-h100-sxm": h100}) == h100
    two = {"nvidia-h100-sxm": (0.7, 0.9, 0.5), "nvidia-b200": (0.9, 0.7, 0.7), "amd-mi300x": (0.3, 0.3, 0.3)}
    assert fs.family_kernels("nvidia-h200-sxm", two) == (0.8, 0.8, 0.6)
    amd = DERATES["amd"]
    assert fs.family_kernels("amd-mi355x", {"nvidia-h100-sxm": h100}) == (amd.compute_eff, amd.mem_eff, amd.compute_eff)
    # the held-out device's set is the nearest of the sets the grid costed
    grid = {k: None for k in fs.KERNEL_EFFS}
    assert fs.nearest(grid, (0.8, 0.8, 0.6)) == (0.8, 0.8, 0.6)
    assert fs.nearest(grid, (0.3, 0.48, 0.3)) == (0.7, 0.7, 0.4)


def test_what_pins_each_constant_down_names_the_groups():
    """A device's FP8 share is pinned by its FP8 rows' groups alone: one group makes it an assumption."""
    rows = [dict(_row(0), gemm_quant="fp8"), dict(_row(1), model="qwen3-32b"),
            dict(_row(2), device="nvidia-h200-sxm", backend="sglang", backend_version="0.5.1.post1")]
    pins = fs.pinned_by(rows)
    assert pins["nvidia-h100-sxm fp8_compute_eff"] == ["llama-3.1-8b / nvidia-h100-sxm / vllm"]
    assert len(pins["nvidia-h100-sxm compute_eff, mem_eff"]) == 2
    assert pins["nvidia-h200-sxm fp8_compute_eff"] == []
    assert pins["sync_fraction"] == ["llama-3.1-8b / nvidia-h100-sxm / vllm", "qwen3-32b / nvidia-h100-sxm / vllm"]


def test_sglang_rows_launched_with_mixed_chunks_mix_and_share_the_wave_fit():
    """[Note: sweep launch flags]: aiconfigurator launched SGLang 0.5.6.post2 and later with --enable-mixed-chunk,
    0.5.1.post1 without; the mixing rows pin the shared wave share, not SGLang's own constants."""
    from backends.engines import all_costs

    ENGINES = all_costs()
    old, new, later = (dict(_row(i, "nvidia-h200-sxm"), backend="sglang", backend_version=v)
                       for i, v in enumerate(("0.5.1.post1", "0.5.6.post2", "0.5.8.post1")))
    assert [fs.mixes(r) for r in (old, new, later)] == [False, True, True]
    assert fs.row_engine(old, ENGINES) == ENGINES["sglang"]
    launched = fs.row_engine(new, ENGINES)
    assert launched.wave_share == ENGINES["trtllm"].wave_share < 1.0 == ENGINES["sglang"].wave_share
    pins = fs.pinned_by([old, dict(new, model="qwen3-32b")])
    assert pins["sync_fraction"] == ["qwen3-32b / nvidia-h200-sxm / sglang"]
    # SGLang's own constants: only the rows that ran it as gimletc launches it (no mixed chunks), and its admission
    # by none of them (its waves stay whole: no request waits for a completion)
    assert pins["sglang request_overhead_s"] == ["llama-3.1-8b / nvidia-h200-sxm / sglang"]
    assert pins["sglang admission_fraction"] == []


def test_regenerating_the_tables_keeps_what_is_written_by_hand(tmp_path):
    """`--markdown PATH` rewrites the generated tables and keeps PATH's text from the hand-written marker on."""
    doc = tmp_path / "fidelity.md"
    assert report.kept_below(doc) == "\n" + report.HAND_WRITTEN + "\n"  # a new file gets the marker
    doc.write_text("# old tables\n| a |\n" + report.HAND_WRITTEN + "\n\n## Notes\nkept\n")
    assert report.kept_below(doc) == report.HAND_WRITTEN + "\n\n## Notes\nkept\n"


def test_a_sweep_row_reads_its_kv_cache_at_the_engines_bf16():
    """[Note: sweep KV dtype]: an FP8 row's cache is costed at BF16, as its engine's ``auto`` stored it. Hand
    arithmetic on Llama-3.1-8B / H200 / SGLang, TP 1, 1000 x 2000 tokens, 256 clients: a decode step reads every
    running sequence's K and V, 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131,072 bytes per token, over a
    mean context of 1000 + 2000 / 2 tokens: 67.1 GB, 20.0 ms at 70% of 4.8 TB/s. At FP8 the cache is half that, and
    the whole step would cost 15 ms."""
    row = dict(_row(0, "nvidia-h200-sxm"), backend="sglang", backend_version="0.5.6.post2", dtype="fp8",
               gemm_quant="fp8_block", tp="1", concurrency="256", input_len="1000", output_len="2000")
    [(steps, _family)] = fs.physics([row], (0.8, 0.7, 0.4))
    assert steps.active == 256
    cache = 256 * (1000 + 2000 / 2) * 2 * 32 * 8 * 128 * 2
    assert steps.decode_s >= cache / (0.7 * 4.8e12)
    assert steps.decode_s <= 1.3 * cache / (0.7 * 4.8e12)  # the rest: 8 GB of FP8 weights, attention's own math


def test_an_engine_constant_no_row_can_move_stays_at_none():
    """SGLang's default keeps a closed loop's waves whole ([Note: waves]): no request of its lock-step rows waits
    for a completion, so its admission share cannot move their predictions, and the fit leaves it where it starts,
    at "none" (fitted, it landed wherever the search stopped, and reached held-out rows whose lengths vary). Its
    front end, which those rows do see, is fitted."""
    from backends.engines import all_costs

    ENGINES = all_costs()
    if not fs.DEFAULT_CSV.is_file():
        pytest.skip("../shared/reference is not beside this checkout")
    rows = [r for r in fs.load_rows(fs.DEFAULT_CSV) if r["backend_version"] == "0.5.1.post1"][:6]
    phys = fs.physics(rows)
    none = {p.name: p.lo for p in fs.engine_params()}
    at = {k: fs.errors(rows, phys, {"sglang": replace(ENGINES["sglang"], admission_fraction=k)}) for k in (1e-4, 0.5)}
    assert [e["ttft_pred_ms"] for e in at[1e-4]] == [e["ttft_pred_ms"] for e in at[0.5]]
    assert not any(fs.pins(r, "admission_fraction") for r in rows) and all(fs.pins(r, "request_overhead_s")
                                                                              for r in rows)
    fitted = fs.fit_costs(rows, phys, dict(ENGINES), rounds=1, restarts=1)["sglang"]
    assert fitted.admission_fraction == none["admission_fraction"]
    assert fitted.request_overhead_s > 10 * none["request_overhead_s"]
