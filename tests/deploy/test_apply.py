"""Applying a replan to a running local deployment ([Note: applying a replan locally] in compiler/deploy/apply.py),
with stand-in engines: a script that answers /health on the port it is given plays vLLM and vllm-router, so the
processes, the request/answer files, the kept, stopped and started replicas and the router's restart are real
while no model runs (the real engines are tests/deploy/test_local_engines.py's, marked ``engine``)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)

CLUSTER = REPO / "examples" / "cpu_pd" / "cluster.yaml"
FAKE = '''#!{python}
import http.server, os, sys, time
delay = os.environ.get("FAKE_START_DELAY_FILE")  # the seconds written there, when it exists: a slow engine start
if delay and os.path.exists(delay) and "--model" in sys.argv:
    time.sleep(float(open(delay).read()))
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _plan(tmp: Path, name: str, workload: dict) -> Path:
    import yaml

    from compiler.compile_inputs import CompileInputs
    from compiler.driver import compile
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.ir.files import atomic_write_text

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(workload))
    c = compile("llama-mini", str(CLUSTER), str(path), baselines=False, analyse=False)
    out = tmp / name
    write_plan_dir(c.plan, "llama-mini", out, Options(onnx=False))
    atomic_write_text(out / "report" / "inputs.json", CompileInputs.of("llama-mini", CLUSTER, path).to_json())
    return out


def _scaled(running: Path, out: Path) -> Path:
    """The running plan with one more decode replica (what a replan that scales decode writes)."""
    import shutil

    from compiler.emit.plan_checks import load_plan
    from compiler.ir.files import atomic_write_text

    shutil.copytree(running, out, ignore=shutil.ignore_patterns("deploy"))
    plan = load_plan(running)
    pools = [p.model_copy(update={"replicas": p.replicas + 1}) if p.role == "decode" else p for p in plan.pools]
    atomic_write_text(out / "plan.json", plan.model_copy(update={"pools": pools}).dumps())
    return out


def _outages(url: str, stop: threading.Event, down: list) -> None:
    """Poll `url` every 20 ms until `stop`; append the length of each stretch it refused connections."""
    import urllib.request

    since = None
    while not stop.is_set():
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).read()
            if since is not None:
                down.append(time.monotonic() - since)
                since = None
        except OSError:
            since = since if since is not None else time.monotonic()
        time.sleep(0.02)
    if since is not None:
        down.append(time.monotonic() - since)


def test_apply_keeps_what_stays_stops_and_starts_the_rest(tmp_path, monkeypatch):
    """Two replans in a row: one more decode replica (both running replicas kept, one started), then a plan of
    other shapes (all stopped, its own started), asked of the first replan's directory as ``gimletc replan
    scaled/ --apply`` asks it; each kept replica is the same process under its new name. New engines take 3 s to
    start; the router answers throughout but for its own restart (make before break: breaking first would leave
    it down for those 3 s)."""
    from compiler.deploy.apply import apply_local
    from compiler.deploy.local import prepare
    from compiler.emit.plan_checks import load_plan

    docs = {"name": "docs", "arrival_rate_per_s": "maximise", "slo": {"ttft_ms": 5000, "tpot_ms": 4},
            "classes": [{"name": "docs", "share": 1, "input_len": {"mean": 768, "max": 1024},
                         "output_len": {"mean": 16, "max": 32}}]}
    chat = {**docs, "name": "chat", "slo": {"ttft_ms": 5000, "tpot_ms": 200},
            "classes": [{"name": "chat", "share": 1, "input_len": {"mean": 64, "max": 128},
                         "output_len": {"mean": 128, "max": 256}}]}
    running = _plan(tmp_path, "running", docs)
    scaled, other = _scaled(running, tmp_path / "scaled"), _plan(tmp_path, "other", chat)
    assert sorted(p.role for p in load_plan(running).pools) == ["decode", "prefill"]  # examples/cpu_pd's split
    shapes = lambda d: {p.option.split("|")[0] for p in load_plan(d).pools}  # noqa: E731
    assert not shapes(other) & shapes(running)

    fake = tmp_path / "fake-engine"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    delay = tmp_path / "engine-start-s"
    monkeypatch.setenv("FAKE_START_DELAY_FILE", str(delay))
    deployment = prepare(running, fake, fake)
    deployment.start(60.0, lambda _m: None)
    watcher = threading.Thread(target=deployment.watch, args=(time.monotonic() + 400, lambda _m: None), daemon=True)
    watcher.start()
    answers = []
    try:
        before = {(p.pool, p.replica): p.popen.pid for p in deployment.procs}
        assert "held" in apply_local(running, other, act=False)  # a held replan changes nothing
        assert {(p.pool, p.replica): p.popen.pid for p in deployment.procs} == before
        delay.write_text("3")
        for current, nxt in ((running, scaled), (scaled, other)):
            pids = {(p.pool, p.replica): p.popen.pid for p in deployment.procs}
            router = json.loads((current / "deploy" / "endpoints.json").read_text())["router"]
            down, stop = [], threading.Event()
            poller = threading.Thread(target=_outages, args=(router, stop, down), daemon=True)
            poller.start()
            message = apply_local(current, nxt, act=True, timeout_s=240)
            stop.set()
            poller.join(timeout=10)
            assert max(down, default=0.0) < 1.5, f"the router was down {max(down):.1f} s during the apply"
            answers.append(json.loads((current / "deploy" / "applied.json").read_text()))
            endpoints = json.loads((running / "deploy" / "endpoints.json").read_text())
            assert json.loads((nxt / "deploy" / "endpoints.json").read_text()) == endpoints
            engines = {(p["pool"], p["replica"]): p["pid"] for p in endpoints["processes"] if p["pool"] != "router"}
            plan = load_plan(nxt)
            assert endpoints["plan"] == str(nxt) and "applied" in message
            assert sorted(engines) == sorted((p.name, r) for p in plan.pools for r in range(p.replicas))
            for old, new in answers[-1]["kept"]:
                assert engines[tuple(new)] == pids[tuple(old)]
            print(message)
    finally:
        deployment.stop()
        watcher.join(timeout=30)
    assert [(len(a["kept"]), len(a["started"]), len(a["stopped"])) for a in answers] == [(2, 1, 0), (0, 2, 3)]
    assert not (running / "deploy" / "apply.json").exists() and not (scaled / "deploy" / "apply.json").exists()
    assert not any(d.joinpath("deploy", "endpoints.json").exists() for d in (running, scaled, other))


def test_apply_without_a_running_deployment_says_how_to_start_one(tmp_path):
    from compiler.deploy.apply import apply_local
    from compiler.ir.errors import BadInput

    for act in (True, False):
        with pytest.raises(BadInput, match="gimletc deploy .* --local"):
            apply_local(tmp_path, tmp_path / "next", act=act)
