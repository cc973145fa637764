"""The decode export installs transformers' dynamo patches that reach the model, and imports no other model."""

import json
import subprocess
import sys

import pytest

from compiler.inputs.model_spec import resolve_model
from compiler.trace.export import dynamo_patches, begin
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(300)


def test_a_patch_of_the_models_own_module_is_installed_and_another_models_is_not(monkeypatch):
    from transformers.exporters import utils as hf
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model  # noqa: F401 (registers)
    from transformers.models.llama import modeling_llama

    _traced, model, _inputs = begin(resolve_model("llama-tiny"))
    marker, elsewhere = object(), object()
    monkeypatch.setitem(hf._PATCHES, "dynamo", [
        *hf._PATCHES["dynamo"],
        ("transformers.models.llama.modeling_llama", "rotate_half", lambda _original: marker),
        ("transformers.models.llama.modeling_llama.LlamaAttention", "forward", lambda _original: marker),
        ("transformers.models.mistral.modeling_mistral", "rotate_half", lambda _original: elsewhere),
    ])
    original = modeling_llama.rotate_half
    sdpa = __import__("torch").nn.functional.scaled_dot_product_attention
    with dynamo_patches(model):
        assert modeling_llama.rotate_half is marker and modeling_llama.LlamaAttention.forward is marker
        assert "transformers.models.mistral.modeling_mistral" not in sys.modules or \
            sys.modules["transformers.models.mistral.modeling_mistral"].rotate_half is not elsewhere
        # transformers' general patch (no model package in its path) is installed too
        assert __import__("torch").nn.functional.scaled_dot_product_attention is not sdpa
    assert modeling_llama.rotate_half is original


def test_a_cold_decode_export_imports_no_model_package_but_its_own():
    code = ("import json, sys\nfrom compiler.inputs.model_spec import resolve_model\n"
            "from compiler.trace.export import begin, export_phase, quiet_export_logs\n"
            "traced, model, _ = begin(resolve_model('llama-tiny'))\n"
            "with quiet_export_logs():\n    export_phase(traced, model, 'decode')\n"
            "print(json.dumps(sorted({m.split('.')[2] for m in sys.modules if m.startswith('transformers.models.')"
            " and m.count('.') >= 2})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    # transformers' apply_patches("dynamo") would import every patched model package (nllb_moe, qwen2_vl, ...)
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) <= {"auto", "llama", "encoder_decoder"}
