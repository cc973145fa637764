"""`gimletc inspect --json` on full-size presets against arithmetic from their configs.

Expectations are computed here from config.json fields with the textbook
parameter formulas, never taken from the code under test.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import preset_config, run_cli


def inspect_json(model: str, *args: str) -> dict:
    proc = run_cli("inspect", model, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def head_dim(c: dict) -> int:
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def llama_params(c: dict) -> int:
    h, i, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    q, kv = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    attn = h * q + 2 * h * kv + q * h
    layer = attn + 3 * h * i + 2 * h
    return v * h + n * layer + h + (0 if c.get("tie_word_embeddings") else v * h)


def attention_flops_per_token(c: dict, context: int) -> int:
    """QK^T and PV over `context` cached tokens plus the new one, every layer."""
    return 4 * (context + 1) * c["num_attention_heads"] * head_dim(c) * c["num_hidden_layers"]


def test_llama_3_1_70b():
    c = preset_config("llama-3.1-70b")
    r = inspect_json("llama-3.1-70b", "--context-len", "4096")
    expected = llama_params(c)
    assert r["params_total"] == pytest.approx(expected, rel=1e-6)
    assert r["params_total"] == pytest.approx(70.55e9, rel=0.005)
    assert r["kv_bytes_per_token"] == 80 * 8 * 128 * 2 * 2 == 327680
    for phase in ("prefill", "decode"):
        roles = [b["role"] for b in r[phase]["blocks"]]
        assert roles.count("attn") == 80 and roles.count("ffn") == 80
    # Decode: every non-embedding weight is used once per token in a multiply-add, plus attention.
    matmul_params = expected - c["vocab_size"] * c["hidden_size"]
    assert r["params_active"] == matmul_params
    want = 2 * matmul_params + attention_flops_per_token(c, 4096)
    assert r["decode"]["flops_per_token"] == pytest.approx(want, rel=0.05)
    # Decode at batch 1 reads every weight once: the step moves about the model's bytes.
    assert r["decode"]["weight_read_bytes"] == pytest.approx(2 * (expected - c["vocab_size"] * c["hidden_size"]), rel=0.01)


def test_mixtral_8x7b_total_and_active():
    c = preset_config("mixtral-8x7b")
    r = inspect_json("mixtral-8x7b")
    h, i, n, e, k = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_local_experts"],
                     c["num_experts_per_tok"])
    q, kv = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    experts = n * e * 3 * h * i
    total = c["vocab_size"] * h * 2 + n * (h * q + 2 * h * kv + q * h + h * e + 2 * h) + h + experts
    assert r["params_total"] == pytest.approx(total, rel=1e-6)
    assert r["params_total"] == pytest.approx(46.7e9, rel=0.01)
    active = total - c["vocab_size"] * h - experts * (1 - k / e)
    assert r["params_active"] == pytest.approx(active, rel=1e-6)
    assert r["params_active"] == pytest.approx(12.9e9, rel=0.03)
    assert sum(b["role"] == "moe" for b in r["decode"]["blocks"]) == n


def test_gpt_oss_120b_total_and_active():
    c = preset_config("gpt-oss-120b")
    r = inspect_json("gpt-oss-120b")
    h, i, n, e, k, v = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_local_experts"],
                        c["num_experts_per_tok"], c["vocab_size"])
    q, kv = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    attn = (h * q + q) + 2 * (h * kv + kv) + (q * h + h) + c["num_attention_heads"]  # biases and sinks
    experts = e * (h * 2 * i + 2 * i) + e * (i * h + h)
    router = h * e + e
    total = 2 * v * h + n * (attn + router + experts + 2 * h) + h
    assert r["params_total"] == pytest.approx(total, rel=1e-6)
    assert r["params_total"] == pytest.approx(116.8e9, rel=0.02)
    active = total - v * h - n * experts * (1 - k / e)
    assert r["params_active"] == pytest.approx(active, rel=1e-6)
    assert r["params_active"] == pytest.approx(5.1e9, rel=0.05)
    kinds = [b["attention"] for b in r["decode"]["blocks"] if b["role"] == "attn"]
    assert kinds == ["sliding" if t == "sliding_attention" else "full" for t in c["layer_types"]]
    # At fp4 the checkpoint stores only the routed experts at 4 bits; attention, router, embeddings and head
    # stay bf16 (its quantization_config's modules_to_not_convert).
    fp4 = inspect_json("gpt-oss-120b", "--dtype", "fp4")
    assert (fp4["dtype"], fp4["dense_dtype"]) == ("fp4", "bf16")
    assert fp4["weight_bytes"] == pytest.approx(n * experts * 0.5 + (total - n * experts) * 2, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama-3.1-405b", "deepseek-v3", "qwen3-235b-a22b"])
def test_largest_presets_trace(model):
    prov = preset_config(model)["_gimletc"]
    r = inspect_json(model)
    assert r["params_total"] == pytest.approx(prov["params_total_published"], rel=0.01)
    assert not r["unaccounted"]
