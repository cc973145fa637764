"""[Note: AMX and the KV hand-over]: the engines of a P/D pair on a host with AMX start with vLLM's AMX attention
off, and only they; the mechanism (a sitecustomize on PYTHONPATH) is checked in a real interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

from compiler.deploy import launch


def _pool(connector):
    return SimpleNamespace(launch=SimpleNamespace(env={"VLLM_CPU_KVCACHE_SPACE": "1"}, kv_connector=connector))


def test_only_a_pair_on_an_amx_host_turns_amx_off(monkeypatch):
    base = {"HOME": "/h"}
    for amx in (True, False):
        monkeypatch.setattr(launch, "has_amx", lambda amx=amx: amx)
        for role in ("kv_producer", "kv_consumer"):
            env = launch.engine_env(_pool(SimpleNamespace(role=role)), base)
            assert (env.get("GIMLETC_ENGINE_NO_AMX"), env.get("PYTHONPATH")) == (
                ("1", str(launch.ENGINE_SITE)) if amx else (None, None))
            assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HOME"] == "/h"
        assert "GIMLETC_ENGINE_NO_AMX" not in launch.engine_env(_pool(None), base)


def test_the_engine_site_makes_torch_report_no_amx():
    """What vLLM's `_get_attn_isa` asks, in a fresh interpreter started as deploy --local starts a pair's engine."""
    code = "import torch.cpu; print(torch.cpu._is_amx_tile_supported())"
    env = {**os.environ, "PYTHONPATH": str(launch.ENGINE_SITE), "GIMLETC_ENGINE_NO_AMX": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
