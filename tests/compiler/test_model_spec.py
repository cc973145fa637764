import json

import pytest

from compiler.ir.errors import BadInput, UnsupportedModel
from compiler.inputs.model_spec import load_hf_config, preset_names, resolve_model

REQUIRED = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3.1-8b", "llama-3.1-70b",
            "llama-3.3-70b", "llama-3.1-405b", "mixtral-8x7b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b",
            "gpt-oss-120b", "deepseek-v3", "llama-tiny", "mixtral-tiny", "qwen3-moe-tiny", "gpt-oss-tiny"}


def test_all_required_presets_ship():
    assert REQUIRED <= set(preset_names())


def test_preset_and_path_resolve_to_the_same_config(tmp_path):
    preset = resolve_model("llama-tiny")
    (tmp_path / "config.json").write_text(json.dumps(preset.config))
    by_folder = resolve_model(str(tmp_path))
    by_file = resolve_model(str(tmp_path / "config.json"))
    assert preset.sha256 == by_folder.sha256 == by_file.sha256
    assert by_folder.kind == "config"


def test_unknown_preset_suggests_close_names():
    with pytest.raises(BadInput, match="did you mean llama-3.1-70b"):
        resolve_model("llama-3.1-70")


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


def test_malformed_json_names_line_and_column(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",\n  "hidden_size": }')
    with pytest.raises(BadInput, match=r"not valid JSON \(line 2, column 18"):
        resolve_model(str(bad))


def test_unsupported_architecture(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llamma", "hidden_size": 8}))
    with pytest.raises(UnsupportedModel, match="model_type 'llamma'.*did you mean llama"):
        load_hf_config(resolve_model(str(bad)))


def test_callable_spec_is_not_imported_until_built():
    spec = resolve_model("no_such_module:build")
    assert spec.kind == "callable"
