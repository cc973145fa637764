"""Running split plans reproduces Hugging Face: tokens, logits, tensor-parallel pairings, KV bytes, checkpoints.

Plans have a prefill pool and decode split into attention and FFN pools (both
splits, 4 stage workers); the reference is Hugging Face `generate` on the same
weights (read back from the plan's ``model/`` folder), one prompt at a time.
"""

from __future__ import annotations

import pytest

from tests.runtime.conftest import NEW_TOKENS, PROMPTS, build_plan_dir, hf_reference, split_shapes


def run_plan(plan_dir, prompts=PROMPTS, **kw):
    from compiler.runtime.engine import Engine, Request

    engine = Engine(plan_dir)
    try:
        reqs = engine.run([Request(list(p), max_new_tokens=NEW_TOKENS, keep_logits=True, **kw) for p in prompts])
        stats = engine.worker_stats()
    finally:
        engine.close()
    return engine, reqs, stats


def assert_matches_hf(plan_dir, reqs):
    import torch

    for req, (tokens, logits) in zip(reqs, hf_reference(plan_dir / "model", PROMPTS, NEW_TOKENS)):
        assert req.tokens == tokens
        for got, want in zip(req.logits, logits):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


@pytest.mark.timeout(180)
def test_llama_split_plan_matches_hf_and_kv_bytes_equal_the_plan(llama_split):
    engine, reqs, stats = run_plan(llama_split)
    assert_matches_hf(llama_split, reqs)
    # every request joined one running batch (continuous batching over 8 different lengths)
    assert all(r.unit == "attn/r0" for r in reqs)
    kv = engine.plan.transfers[0].detail
    sent = sum(s["bytes"].get("kv_pages", 0) for s in stats.values())
    # independent arithmetic: 2 (K, V) x 2 layers x 2 KV heads x 16 dims x 4 bytes per prompt token
    assert kv.bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert sent == sum(len(p) for p in PROMPTS) * kv.bytes_per_token == engine.kv_bytes_predicted
    assert sum(s["bytes"].get("hidden_states", 0) for s in stats.values()) > 0  # attention <-> FFN every layer


@pytest.mark.timeout(180)
def test_mixtral_split_plan_matches_hf(tmp_path_factory):
    plan_dir = build_plan_dir(tmp_path_factory, "mixtral-tiny", split_shapes(1, 1, ffn_tp=2))
    _, reqs, _ = run_plan(plan_dir)
    assert_matches_hf(plan_dir, reqs)


@pytest.mark.timeout(180)
def test_prefill_tp1_to_decode_tp2_gives_the_same_tokens(tmp_path_factory, llama_split):
    reverse = build_plan_dir(tmp_path_factory, "llama-tiny", split_shapes(1, 2))
    engine, reqs, _ = run_plan(reverse, prompts=PROMPTS[:4])
    pairs = engine.plan.transfers[0].detail.pairs
    assert [(p.src_tp_rank, p.dst_tp_rank, p.kv_heads) for p in pairs] == [(0, 0, [0, 1]), (0, 1, [1, 2])]
    assert [r.tokens for r in reqs] == [t for t, _ in hf_reference(reverse / "model", PROMPTS[:4], NEW_TOKENS)]
    # prefill tp=2 -> decode tp=1 is `llama_split`, whose tokens test_llama_split_plan_matches_hf compares with the
    # same reference: both plans hold the same seeded weights
    assert (reverse / "model" / "model.safetensors").read_bytes() == (llama_split / "model" /
                                                                      "model.safetensors").read_bytes()


@pytest.mark.slow  # the default run slices both models from save_pretrained folders in test_speculative.py
@pytest.mark.timeout(180)
def test_weights_sliced_from_a_save_pretrained_folder(tmp_path_factory):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from compiler.inputs.model_spec import load_hf_config, resolve_model

    ckpt = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(123)  # other weights than the plan's seeded default
    config = AutoConfig.for_model(**load_hf_config(resolve_model("llama-tiny")).to_dict())
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(str(ckpt))
    plan_dir = build_plan_dir(tmp_path_factory, "llama-tiny", split_shapes(2, 1), weights_dir=str(ckpt))
    assert (plan_dir / "model" / "reference.json").is_file()
    _, reqs, _ = run_plan(plan_dir, prompts=PROMPTS[:3])
    want = hf_reference(ckpt, PROMPTS[:3], NEW_TOKENS)
    assert [r.tokens for r in reqs] == [t for t, _ in want]


def test_edited_stage_program_is_refused(llama_split, tmp_path):
    import shutil

    from compiler.ir.errors import BadInput
    from compiler.runtime.plan_dir import open_plan_dir

    copy = tmp_path / "plan"
    shutil.copytree(llama_split, copy)
    program = copy / "stages" / "attn" / "s0_tp0.py"
    program.write_text(program.read_text() + "\nimport os  # injected\n")
    with pytest.raises(BadInput, match="stages/attn/s0_tp0.py does not match its sha256"):
        open_plan_dir(copy)


def test_mismatched_kv_dtypes_are_refused_without_a_conversion(llama_split):
    from compiler.plan.checks import load_plan
    from compiler.plan.transfers import validate_transfers
    from compiler.ir.errors import BadInput

    plan = load_plan(llama_split)
    attn = next(p for p in plan.pools if p.name == "attn")
    stage = attn.stages[0].model_copy(update={"execution": attn.stages[0].execution.model_copy(
        update={"kv_dtype": "bf16"})})
    pools = [p.model_copy(update={"stages": [stage]}) if p.name == "attn" else p for p in plan.pools]
    kv = plan.transfers[0]
    bad = plan.model_copy(update={"pools": pools, "transfers": [kv.model_copy(update={
        "detail": kv.detail.model_copy(update={"dst_dtype": "bf16"})})] + plan.transfers[1:]})
    with pytest.raises(BadInput, match="no cast step"):
        validate_transfers(bad)
    from compiler.plan.schema import Conversion

    fixed = bad.model_copy(update={"transfers": [bad.transfers[0].model_copy(update={"detail": bad.transfers[0].detail
                           .model_copy(update={"conversions": [Conversion(op="cast", src="fp32", dst="bf16",
                                                                          at="receiver")]})})] + bad.transfers[1:]})
    validate_transfers(fixed)
