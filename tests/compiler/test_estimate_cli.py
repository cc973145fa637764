"""`gimletc backends` and `gimletc estimate` as a user runs them."""

from __future__ import annotations

import csv
import json

from compiler.ir.estimate import KEYS
from tests.conftest import assert_one_line_error, run_cli


def test_backends_json_lists_every_family():
    proc = run_cli("backends", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["family"] for r in rows} == {"nvidia", "amd", "trainium", "cerebras", "dmatrix", "gaudi", "cpu"}


def test_estimate_json_has_the_documented_keys():
    proc = run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h100-sxm", "--batch", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert set(KEYS) <= set(r) and r["prediction"] is True
    assert r["batch"] == 8 and r["fits"]
    assert r["bound"] == {"prefill": "compute", "decode": "memory"}


#: Hand arithmetic from the model card and the datasheet, sharing nothing with the cost model: Llama-3.1-8B has
#: 8.03e9 parameters (bf16: 2 bytes each), 32 layers and 8 KV heads of 128 dimensions (its config.json), so a
#: token's K and V take 2 x 32 x 8 x 128 x 2 = 131,072 bytes; an H100 SXM has 80 GB of HBM3 at 3.35 TB/s.
WEIGHTS_8B = 8.03e9 * 2
KV_PER_TOKEN_8B = 2 * 32 * 8 * 128 * 2
H100_HBM, H100_BW = 80e9, 3.35e12


def test_a_decode_step_reads_the_weights_once_at_no_more_than_the_datasheets_bandwidth():
    """At batch 8 a step of Llama-3.1-8B reads its 16 GB of weights (KV is 1% of that): no faster than the HBM's
    3.35 TB/s allow (4.8 ms), and within 2x of it (an engine reaching under half its bandwidth at batch 8 would
    be a model error). The batch emits at most one token per sequence per step, and, with 256 output tokens
    against one prompt's prefill, at least 80% of that."""
    r = json.loads(run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h100-sxm", "--batch", "8",
                           "--json").stdout)
    floor_ms = WEIGHTS_8B / H100_BW * 1e3
    assert floor_ms <= r["tpot_ms"] <= 2 * floor_ms, (r["tpot_ms"], floor_ms)
    per_step = 8 / (r["tpot_ms"] / 1e3)
    assert 0.8 * per_step <= r["output_tokens_per_s"] <= per_step


def test_batch_max_and_concurrency():
    """The largest batch keeps each sequence's KV (1,024 + 256 tokens) in what the weights leave of 80 GB: at most
    381 sequences, and no less than half that (activations and the engine's reserve take the rest)."""
    mx = json.loads(run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h100-sxm", "--batch", "max",
                            "--json").stdout)
    room = (H100_HBM - WEIGHTS_8B) / (KV_PER_TOKEN_8B * (mx["input_len"] + mx["output_len"]))
    assert (mx["input_len"], mx["output_len"]) == (1024, 256)
    assert mx["batch"] == mx["max_batch"] and room / 2 <= mx["max_batch"] <= room, (mx["max_batch"], room)
    cc = json.loads(run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h100-sxm", "--concurrency", "32",
                            "--json").stdout)
    assert cc["batch"] == 32 and cc["interference"] >= 1.0


def test_model_that_does_not_fit_says_how_many_devices():
    proc = run_cli("estimate", "llama-3.1-405b", "--device", "nvidia-h100-sxm", "--count", "2", "--batch", "1")
    assert_one_line_error(proc, "does not fit", "needs at least 11 devices")


def test_unknown_device_lists_known_ids():
    assert_one_line_error(run_cli("estimate", "llama-tiny", "--device", "nvidia-h1000", "--batch", "1"),
                           "nvidia-h1000", "nvidia-h100-sxm")


def test_scenarios_csv_reports_bad_rows_in_place(tmp_path):
    src = tmp_path / "scenarios.csv"
    src.write_text("model,device,count,tp,pp,dtype,input_len,output_len,batch,concurrency\n"
                   "llama-3.1-8b,nvidia-h100-sxm,1,1,1,bf16,512,128,4,\n"
                   "llama-3.1-8b,nvidia-h9000,1,1,1,bf16,512,128,4,\n"
                   "llama-3.1-8b,amd-mi300x,2,2,1,fp8,512,128,,16\n")
    out = tmp_path / "out.csv"
    proc = run_cli("estimate", "--scenarios", str(src), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3
    assert rows[0]["error"] == "" and float(rows[0]["tpot_ms"]) > 0
    assert "nvidia-h9000" in rows[1]["error"] and rows[1]["tpot_ms"] == ""
    assert rows[2]["error"] == "" and rows[2]["batch"] == "16"  # one tp=2 replica holds all 16


def _scenarios(tmp_path, text: str) -> list[dict]:
    """`gimletc estimate --scenarios` on a CSV of `text`: one JSON object per row."""
    src = tmp_path / "scenarios.csv"
    src.write_text(text)
    proc = run_cli("estimate", "--scenarios", str(src), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_scenarios_lengths_column_reaches_the_closed_loop(tmp_path):
    """``lengths``: vary (a benchmark's range of lengths) takes SGLang's clients out of lock-step waves, so the first
    token comes sooner than where every request is alike ([Note: waves]); a value it does not know is that row's
    error, naming the column."""
    fixed, vary, bad = _scenarios(tmp_path, "model,device,engine,input_len,output_len,concurrency,lengths\n"
                                            "llama-3.1-8b,nvidia-h100-sxm,sglang,1024,256,16,fixed\n"
                                            "llama-3.1-8b,nvidia-h100-sxm,sglang,1024,256,16,vary\n"
                                            "llama-3.1-8b,nvidia-h100-sxm,sglang,1024,256,16,sometimes\n")
    assert not fixed["error"] and not vary["error"]
    assert float(vary["ttft_ms"]) < 0.5 * float(fixed["ttft_ms"])
    assert "column 'lengths'" in bad["error"] and "vary" in bad["error"]


def test_scenarios_bucket_columns_pad_a_neuron_prompt_and_a_bad_list_is_that_rows_error(tmp_path):
    """[Note: buckets]: a 3,000-token prompt on Trainium2 runs in the 4,096 program of the launch the row names, so
    its first token comes later than in gimletc's own launch, which compiles a 3,072 bucket (3,000 up to a multiple of
    128); a list that cannot hold the prompt is the row's error, naming the column; the API takes the same lists."""
    from compiler.api import estimate

    own, launch, bad = _scenarios(tmp_path, "model,device,count,input_len,output_len,batch,context_buckets,"
                                            "token_buckets\n"
                                            "llama-3.1-8b,aws-trn2,1,3000,200,1,,\n"
                                            "llama-3.1-8b,aws-trn2,1,3000,200,1,1024 2048 4096,4096\n"
                                            "llama-3.1-8b,aws-trn2,1,3000,200,1,1024 2048,\n")
    assert not own["error"] and not launch["error"]
    assert float(launch["ttft_ms"]) > 1.2 * float(own["ttft_ms"])
    assert "column 'context_buckets'" in bad["error"] and "cannot hold 3000 tokens" in bad["error"]
    api = estimate("llama-3.1-8b", "aws-trn2", input_len=3000, output_len=200, context_buckets=[1024, 2048, 4096],
                   token_buckets=[4096])
    assert api.ttft_ms == float(launch["ttft_ms"])
