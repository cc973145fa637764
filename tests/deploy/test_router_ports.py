"""[Note: ports chosen at start] in compiler/deploy/local.py: a router gets its ports when it starts, after the
engines listen, and a port taken between picking and binding is picked again, once.

No engine: the "routers" are a small Python server that answers /health on the port it is given, and fails like
vllm-router ("Address already in use") the first time when told to. Port pressure comes from a process that
grabs freshly freed ports as fast as it can."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROUTER_SCRIPT = r'''
import http.server, os, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
marker = os.environ.get("FAIL_ONCE")
if marker and not os.path.exists(marker):
    open(marker, "w").close()
    print('PanicException: failed to install Prometheus metrics exporter: FailedToCreateHTTPListener('
          '"Address already in use (os error 98)")', flush=True)
    sys.exit(1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _deployment(tmp_path: Path, env: dict[str, str]):
    from compiler.deploy.launch import FRONT, ROUTER, Proc
    from compiler.deploy.local import Deployment

    script = tmp_path / "router.py"
    script.write_text(ROUTER_SCRIPT)
    argv = [sys.executable, str(script), "--host", "127.0.0.1", "--port", "1", "--prometheus-port", "1"]
    router = Proc(ROUTER, 0, 1, list(argv), tmp_path / "router.log", env=env)
    front = Proc(FRONT, 0, 1, [*argv, "--worker-urls", "http://127.0.0.1:1"], tmp_path / "front.log", env=env)
    return Deployment(tmp_path, None, [router, front])


def test_a_router_that_loses_its_port_starts_again_on_another_and_says_so(tmp_path):
    import os

    said: list[str] = []
    d = _deployment(tmp_path, {**os.environ, "FAIL_ONCE": str(tmp_path / "failed-once")})
    try:
        d.start(10.0, said.append)
        router, front = d.procs
        assert any("taken before it bound it" in s and "starting it again" in s for s in said), said
        assert (tmp_path / "failed-once").exists() and router.port != 1 and front.port != 1
        # the front's one worker is the plan's router, wherever it listens now
        assert front.argv[front.argv.index("--worker-urls") + 1] == router.url
    finally:
        d.stop()


def test_many_starts_beside_a_port_grabber_all_come_up(tmp_path):
    """Six starts while another thread binds every freshly freed port it can: ports picked at start (and
    picked again once where lost) bring every router up."""
    import os

    stop = threading.Event()
    held: list[socket.socket] = []

    def grab() -> None:
        while not stop.is_set():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            held.append(s)
            if len(held) > 200:
                held.pop(0).close()
            time.sleep(0.001)

    grabber = threading.Thread(target=grab, daemon=True)
    grabber.start()
    try:
        for i in range(6):
            (tmp_path / f"run{i}").mkdir()
            d = _deployment(tmp_path / f"run{i}", dict(os.environ))
            try:
                d.start(10.0, lambda _m: None)
            finally:
                d.stop()
    finally:
        stop.set()
        grabber.join(timeout=5)
        for s in held:
            s.close()


def test_an_engine_that_loses_its_port_starts_again_and_the_router_takes_its_new_url(tmp_path, monkeypatch):
    """The cpu_pd split's two engines (stand-ins), the first of which to start exits like vLLM when its port was
    taken ("Address already in use"): it starts again on another port, once, says so, and the plan's router is
    given the engine's new URL, not the lost one."""
    from compiler.deploy.launch import ROUTER, ROUTERS
    from compiler.deploy.local import prepare
    from tests.deploy.helpers import DOCS
    from tests.deploy.helpers import compiled_plan
    from tests.deploy.test_apply import FAKE

    plan = compiled_plan(tmp_path, "running", DOCS)
    fake = tmp_path / "fake-engine"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    once = tmp_path / "lost-a-port"
    wrapper = tmp_path / "engine-losing-its-port"
    # mkdir is atomic: of two engines starting at once, exactly one loses its port
    wrapper.write_text(f"#!/bin/bash\nif [[ \" $* \" == *\" --model \"* ]] && mkdir {once} 2>/dev/null; then "
                       f"echo 'OSError: [Errno 98] Address already in use'; exit 1; fi\nexec {fake} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("FAKE_CALLS_FILE", str(tmp_path / "calls"))
    deployment = prepare(plan, wrapper, fake)
    first = {p.name: p.url for p in deployment.procs if p.pool not in ROUTERS}
    said: list[str] = []
    try:
        deployment.start(60.0, said.append)
        engines = {p.name: p.url for p in deployment.procs if p.pool not in ROUTERS}
        moved = [name for name in engines if engines[name] != first[name]]
        assert once.exists() and len(moved) == 1, (first, engines)
        assert any(moved[0] in s and "starting it again on port" in s for s in said), said
        router = next(p for p in deployment.procs if p.pool == ROUTER)
        assert engines[moved[0]] in router.argv and first[moved[0]] not in router.argv
    finally:
        deployment.stop()
