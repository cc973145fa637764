"""Every tiny preset's plan runs on the reference runtime and its greedy tokens equal Hugging Face `generate`.

One case per tiny preset, so one per architecture family the presets ship
(`test_every_family_has_a_tiny_preset` keeps it so). The plan is a prefill pool
handing KV to decode split into attention and FFN pools (3 gloo stage workers);
GPT-NeoX's parallel residual needs a layer's attention and FFN in one stage, so
its decode pool is whole. The reference is Hugging Face greedy `generate` on the
same saved weights (the plan's ``model/`` folder: the model built from the
preset's config with a fixed seed, saved locally), one prompt at a time.
"""

from __future__ import annotations

import json

import pytest

from tests.runtime.conftest import NEW_TOKENS, PROMPTS, build_plan_dir, hf_reference, split_shapes
from tests.runtime.test_run import run_plan


def _tiny_presets() -> list[str]:
    from compiler.inputs.model_spec import preset_names, preset_provenance

    return [n for n in preset_names()
            if str(preset_provenance(n).get("source", "")).startswith("tiny test variant") and "draft" not in n]


def _model_type(name: str) -> str:
    from compiler.inputs.model_spec import resolve_model

    return resolve_model(name).config["model_type"]


#: Every case takes 20-50 s on a busy 2-core machine (a cold trace, then 3-4 worker processes). The default run
#: keeps one case per distinct runtime path: soft-capping, sliding window and the written-out attention (gemma-2),
#: learned positions without RoPE (gpt2), the common decoder recipe with MLA's padded values (deepseek-v3). Llama
#: and Mixtral run split and tensor-parallel in test_run.py's default tests. Qwen3 runs the common decoder recipe
#: (stage_programs.HF_RECIPES) deepseek-v3 runs, with RoPE as gemma-2 has it: in the slow run.
_SLOW = {"llama-tiny", "mixtral-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny", "phi-3-tiny", "gpt-neox-tiny",
         "gpt-oss-tiny"}


def _shapes(name: str):
    from compiler.emit.handmade import PoolShape

    if _model_type(name) == "gpt_neox":
        return [PoolShape("prefill", "prefill"), PoolShape("decode", "decode")]
    return split_shapes(1, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n
                                  for n in _tiny_presets()])
def test_tiny_preset_plan_runs_and_equals_hf_greedy(tmp_path_factory, name):
    import torch

    plan_dir = build_plan_dir(tmp_path_factory, name, _shapes(name))
    manifest = json.loads((plan_dir / "manifest.json").read_text())
    assert manifest["runnable"], manifest["reason"]
    _, reqs, _ = run_plan(plan_dir)
    for req, (tokens, logits) in zip(reqs, hf_reference(plan_dir / "model", PROMPTS, NEW_TOKENS), strict=True):
        assert req.tokens == tokens
        for got, want in zip(req.logits, logits, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_every_family_has_a_tiny_preset():
    from compiler.emit.stage_programs import SUPPORTED_TYPES
    from compiler.inputs.model_spec import load_hf_config, preset_names, resolve_model

    shipped = {load_hf_config(resolve_model(n)).model_type for n in preset_names()}
    tiny = {_model_type(n) for n in _tiny_presets()}
    assert shipped <= tiny
    assert tiny <= set(SUPPORTED_TYPES)
    # the families the runtime names as runnable (docs/cli/run.md, "Architectures") each have a tiny preset
    assert set(SUPPORTED_TYPES) - {"mistral"} <= tiny


def test_parallel_residual_split_from_its_ffn_is_refused_at_compile(tmp_path_factory, caplog):
    """GPT-NeoX's FFN reads the layer's input: an attention/FFN split gets a warning naming why, and `run` a
    clear error."""
    from compiler.ir.errors import BadInput
    from compiler.runtime.plan_dir import open_plan_dir

    with caplog.at_level("WARNING"):
        plan_dir = build_plan_dir(tmp_path_factory, "gpt-neox-tiny", split_shapes(1, 1))
    assert "use_parallel_residual=true" in caplog.text and "must run in one stage" in caplog.text
    with pytest.raises(BadInput, match="cannot run: gpt_neox use_parallel_residual=true"):
        open_plan_dir(plan_dir)


@pytest.mark.parametrize(("config", "match"), [
    ({"model_type": "falcon", "hidden_size": 64}, r"model_type 'falcon' has no stage-program template yet "
                                                  r"\(supported: llama, mistral, mixtral, deepseek_v3"),
    ({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "intermediate_size": 128}, None),
])
def test_shape_of_names_what_is_missing(config, match):
    from compiler.emit.stage_programs import shape_of
    from compiler.ir.errors import UnsupportedModel

    if match is None:
        assert shape_of(config).head_dim == 16
    else:
        with pytest.raises(UnsupportedModel, match=match):
            shape_of(config)


def test_tensor_parallel_hf_family_is_refused_with_the_fix():
    from compiler.emit.stage_programs import check_pool, shape_of
    from compiler.inputs.model_spec import load_hf_config, resolve_model
    from compiler.ir.errors import UnsupportedModel

    shape = shape_of(load_hf_config(resolve_model("qwen3-tiny")).to_dict())
    check_pool(shape, 1, [["embed", "L0.attn"]])
    with pytest.raises(UnsupportedModel, match="tp=2: model_type 'qwen3'.*place it with tp=1"):
        check_pool(shape, 2, [["embed", "L0.attn"]])


def test_attention_free_model_gets_a_clear_message_not_a_crash(tmp_path):
    """Mamba used to stop with an AttributeError (its config's read-only layer_types) while folding layers."""
    from transformers import MambaConfig

    from compiler.driver import block_graph
    from compiler.ir.errors import UnsupportedModel

    config = MambaConfig(num_hidden_layers=2, hidden_size=64, vocab_size=512, state_size=8).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModel, match="MambaForCausalLM prefill: torch.export failed"):
        block_graph(str(tmp_path / "config.json"), use_cache=False)
