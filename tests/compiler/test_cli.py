"""The CLI as a user meets it: bad input ends in one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("inspect", str(tmp_path / "missing.json")), "missing.json", "not found")


def test_malformed_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 64,,}')
    assert_one_line_error(run_cli("inspect", str(bad)), str(bad), "not valid JSON", "fix the file")


def test_unsupported_architecture(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "wavenet", "hidden_size": 64}))
    assert_one_line_error(run_cli("inspect", str(bad)), "'wavenet'", "model_type")


def test_callable_that_fails_to_import():
    assert_one_line_error(run_cli("inspect", "no_such_pkg.models:build"), "no_such_pkg.models", "PYTHONPATH")


def test_unknown_preset():
    assert_one_line_error(run_cli("inspect", "llama-9-1b"), "llama-9-1b", "--list")


def test_bad_flag_value():
    proc = run_cli("inspect", "llama-tiny", "--batch", "0")
    assert proc.returncode == 2 and "must be at least 1" in proc.stderr


def test_help_and_import_do_not_load_torch():
    code = "import sys, compiler, compiler.cli; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.split() == ["False", "False"]
    assert run_cli("--help").returncode == 0


def test_building_the_parser_loads_no_library_a_command_loads_when_it_runs():
    """Every command starts by building the parser (and `--help` does nothing else): it loads neither the plan's
    schema (pydantic), the solver, the pictures (matplotlib), the terminal's tables (rich) nor replan's modules
    (only its settings, standard library alone, which give the replan flags' defaults)."""
    heavy = ("matplotlib", "pydantic", "ortools", "numpy", "rich", "yaml", "compiler.replan.replan",
             "compiler.replan.metrics", "compiler.replan.correct", "compiler.emit")
    code = ("import sys\nfrom compiler.cli.main import build_parser\nbuild_parser()\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def test_replans_flags_default_to_its_settings():
    from compiler.cli.main import build_parser
    from compiler.replan.replan import Settings

    args = build_parser().parse_args(["replan", "DIR", "--metrics", "m.txt"])
    want = Settings()
    assert (args.min_gain, args.move_slack, args.cooldown, args.cooldown_gain, args.forecast_error_weight) == (
        want.min_gain, want.slack, want.cooldown_windows, want.cooldown_gain, want.forecast_weight)


def test_table_output_and_layers(tmp_path):
    proc = run_cli("inspect", "llama-tiny", "--layers", "--phase", "decode")
    assert proc.returncode == 0, proc.stderr
    for needle in ("L0.attn", "L1.ffn", "head", "no unaccounted ops", "predictions"):
        assert needle in proc.stdout


def test_callable_model(tmp_path):
    """A module:callable returning a transformers model is traced like a config."""
    (tmp_path / "mymodels.py").write_text(
        "import json, pathlib\n"
        "from transformers import AutoModelForCausalLM, LlamaConfig\n"
        "def build():\n"
        "    return AutoModelForCausalLM.from_config(LlamaConfig(hidden_size=64, intermediate_size=128,\n"
        "        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=256))\n")
    import os

    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "inspect", "mymodels:build", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["layers"] == 2 and r["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2


@pytest.mark.parametrize("dtype,weight_bytes", [("bf16", 2), ("fp8", 1), ("fp4", 0.5)])
def test_dtype_scales_weight_bytes(dtype, weight_bytes):
    r = json.loads(run_cli("inspect", "llama-tiny", "--json", "--dtype", dtype).stdout)
    assert r["weight_bytes"] == r["params_total"] * weight_bytes
