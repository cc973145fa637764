"""Shared fixtures: an isolated trace cache, and tiny models' BlockGraphs traced once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY_MODELS = ("llama-tiny", "mixtral-tiny", "qwen3-tiny", "qwen3-moe-tiny", "gpt-oss-tiny", "deepseek-v3-tiny")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Tests never read or write the user's trace cache."""
    path = tmp_path_factory.mktemp("gimletc-cache")
    old = os.environ.get("GIMLETC_CACHE_DIR")
    os.environ["GIMLETC_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("GIMLETC_CACHE_DIR", None)
    else:
        os.environ["GIMLETC_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_graph():
    """`tiny_graph(name)`: the BlockGraph of a tiny preset, traced once per session."""
    from compiler.driver import block_graph

    memo = {}

    def get(name: str):
        if name not in memo:
            memo[name] = block_graph(name)
        return memo[name]

    return get


def preset_config(name: str) -> dict:
    return json.loads((REPO / "compiler" / "inputs" / "presets" / f"{name}.json").read_text())


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `gimletc` in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def assert_one_line_error(proc, *needles: str) -> None:
    """The CLI failed with exit 2 and exactly one `gimletc: error:` line containing every needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gimletc: error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
