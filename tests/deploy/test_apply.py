"""Applying a replan to a running local deployment ([Note: applying a replan locally] in compiler/deploy/apply.py),
with stand-in engines: a script that answers on the port it is given plays vLLM (a completion takes 0.2 s, and
its /metrics count the ones it holds) and, in the fast test, vllm-router too (noting the worker changes it is
asked for), so the processes, the request/answer files, the kept, stopped and started replicas and the router's
hand-over are real while no model runs. The ``engine`` test runs the real vllm-router (from the engine venv) in
front of the stand-ins under load; tests/deploy/test_apply_engines.py runs real engines."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.deploy.helpers import CHAT, DOCS, Load, compiled_plan, scaled

pytestmark = pytest.mark.timeout(600)

FAKE = """#!PYTHON
import http.server, json, os, sys, threading, time
delay = os.environ.get("FAKE_START_DELAY_FILE")  # the seconds written there, when it exists: a slow engine start
if delay and os.path.exists(delay) and "--model" in sys.argv:
    time.sleep(float(open(delay).read()))
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
held, lock = [0], threading.Lock()
COMPLETION = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m", "usage":
              {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
              "choices": [{"index": 0, "text": " ok", "logprobs": None, "finish_reason": "length"}]}
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/metrics"):
            self.answer(("vllm:num_requests_running %d\\n" % held[0]).encode())
        elif self.path.startswith("/v1/models"):
            self.answer(json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())
        else:
            self.answer(b"ok")
    def do_POST(self):
        if not self.path.startswith("/v1/"):  # a router's /add_worker?url=... or /remove_worker?url=...
            with open(os.environ["FAKE_CALLS_FILE"], "a") as f:
                print(port, self.path, file=f)
            return self.answer(b"ok")
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            held[0] += 1
        time.sleep(0.2)
        self.answer(json.dumps(COMPLETION).encode())
        with lock:
            held[0] -= 1
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _calls(path: Path) -> list[tuple[int, str]]:
    """The worker changes the stand-in routers were asked for, in order: (router port, path with the URL decoded)."""
    from urllib.parse import unquote

    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(port), unquote(call)) for port, call in (line.split(" ", 1) for line in lines)]


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


#: The four replans both apply tests make, and whether each replaces the router behind the front (a P/D router
#: cannot gain a worker, nor lose one safely, nor change its decode policy, round_robin for one decode engine and
#: power_of_two for two, nor its mode) or tells the running one its new workers (a regular router's URLs only).
STEPS = (("running", "scaled", True), ("scaled", "other", True), ("other", "more", False), ("more", "fewer", False))


def _plans(tmp: Path) -> dict[str, Path]:
    """The cpu_pd split, one decode replica more, a colocated pair (other shapes), one colocated replica more and
    one fewer: every kind of hand-over [Note: handing over the router] makes."""
    from compiler.plan.checks import load_plan

    plans = {"running": compiled_plan(tmp, "running", DOCS), "other": compiled_plan(tmp, "other", CHAT)}
    plans["scaled"] = scaled(plans["running"], tmp / "scaled")
    plans["more"] = scaled(plans["other"], tmp / "more", "colocated", 1)
    plans["fewer"] = scaled(plans["more"], tmp / "fewer", "colocated", -1)
    assert sorted(p.role for p in load_plan(plans["running"]).pools) == ["decode", "prefill"]  # cpu_pd's split
    assert [(p.role, p.replicas) for p in load_plan(plans["other"]).pools] == [("colocated", 2)]
    shapes = lambda d: {p.option.split("|")[0] for p in load_plan(d).pools}  # noqa: E731
    assert not shapes(plans["other"]) & shapes(plans["running"])
    return plans


def _stand_in(tmp: Path, monkeypatch) -> tuple[Path, Path, Path]:
    """The stand-in engine script, the file that sets its start delay, and the file its router calls go to."""
    fake = tmp / "fake-engine"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    delay, calls = tmp / "engine-start-s", tmp / "router-calls"
    monkeypatch.setenv("FAKE_START_DELAY_FILE", str(delay))
    monkeypatch.setenv("FAKE_CALLS_FILE", str(calls))
    return fake, delay, calls


def _check_applied(was: dict, current: Path, nxt: Path, running: Path, message: str) -> tuple[dict, dict]:
    """The deployment runs `nxt`'s pools, each kept replica the same process; the front is the same process on
    the same URL. Returns the apply's answer and the endpoints after it."""
    from compiler.deploy.launch import FRONT, ROUTERS
    from compiler.plan.checks import load_plan

    answer = json.loads((current / "deploy" / "applied.json").read_text())
    endpoints = json.loads((running / "deploy" / "endpoints.json").read_text())
    assert json.loads((nxt / "deploy" / "endpoints.json").read_text()) == endpoints
    engines = {(p["pool"], p["replica"]): p["pid"] for p in endpoints["processes"] if p["pool"] not in ROUTERS}
    plan = load_plan(nxt)
    assert endpoints["plan"] == str(nxt) and "applied" in message
    assert sorted(engines) == sorted((p.name, r) for p in plan.pools for r in range(p.replicas))
    pids = {(p["pool"], p["replica"]): p["pid"] for p in was["processes"]}
    for old, new in answer["kept"]:
        assert engines[tuple(new)] == pids[tuple(old)]
    front = lambda e: next(p for p in e["processes"] if p["pool"] == FRONT)  # noqa: E731
    assert front(endpoints) == front(was) and endpoints["router"] == was["router"] == front(was)["url"]
    return answer, endpoints


def test_apply_keeps_what_stays_stops_and_starts_the_rest(tmp_path, monkeypatch):
    """The four `STEPS`, each asked of the previous one's directory as ``gimletc replan DIR --apply`` asks it:
    one more decode replica (both running replicas kept, one started), a plan of other shapes (all stopped, its
    own started), one colocated replica more, one fewer. New engines take 3 s to start, and the deployment's URL
    never refuses a connection (make before break, and the front router stays). Each router is asked for what
    `STEPS` says: the front to take the next plan's router and drop the old one, or the running router to add
    the new engines and remove the leaving ones."""
    from compiler.deploy.apply import apply_local
    from compiler.deploy.launch import FRONT, ROUTER
    from compiler.deploy.local import prepare

    plans = _plans(tmp_path)
    fake, delay, calls = _stand_in(tmp_path, monkeypatch)
    deployment = prepare(plans["running"], fake, fake)
    deployment.start(60.0, lambda _m: None)
    watcher = threading.Thread(target=deployment.watch, args=(time.monotonic() + 400, lambda _m: None), daemon=True)
    watcher.start()
    answers = []
    try:
        before = {(p.pool, p.replica): p.popen.pid for p in deployment.procs}
        assert "held" in apply_local(plans["running"], plans["other"], act=False)  # a held replan changes nothing
        assert {(p.pool, p.replica): p.popen.pid for p in deployment.procs} == before
        delay.write_text("3")
        for current, nxt, router_replaced in STEPS:
            was = json.loads((plans[current] / "deploy" / "endpoints.json").read_text())
            asked_before = len(_calls(calls))
            down, stop = [], threading.Event()
            poller = threading.Thread(target=_outages, args=(was["router"], stop, down), daemon=True)
            poller.start()
            message = apply_local(plans[current], plans[nxt], act=True, timeout_s=240)
            stop.set()
            poller.join(timeout=10)
            assert not down, f"the deployment's URL refused connections for {max(down):.2f} s during the apply"
            answer, endpoints = _check_applied(was, plans[current], plans[nxt], plans["running"], message)
            answers.append(answer)
            routers_was = {p["pool"]: p for p in was["processes"] if p["pool"] in (ROUTER, FRONT)}
            routers = {p["pool"]: p for p in endpoints["processes"] if p["pool"] in (ROUTER, FRONT)}
            old, new = routers_was[ROUTER], routers[ROUTER]
            port = lambda p: int(p["url"].rsplit(":", 1)[1])  # noqa: E731
            if router_replaced:
                assert new["pid"] != old["pid"]
                expected = [(port(routers[FRONT]), f"/add_worker?url={new['url']}"),
                            (port(routers[FRONT]), f"/remove_worker?url={old['url']}")]
            else:
                assert new == old
                started = [p["url"] for p in endpoints["processes"] if [p["pool"], p["replica"]] in answer["started"]]
                left = [p["url"] for p in was["processes"] if [p["pool"], p["replica"]] in answer["stopped"]]
                expected = ([(port(old), f"/add_worker?url={url}") for url in started]
                            + [(port(old), f"/remove_worker?url={url}") for url in left])
            assert _calls(calls)[asked_before:] == expected
            print(message)
    finally:
        deployment.stop()
        watcher.join(timeout=30)
    assert [(len(a["kept"]), len(a["started"]), len(a["stopped"])) for a in answers] == \
        [(2, 1, 0), (0, 2, 3), (2, 1, 0), (2, 0, 1)]
    assert not any(plans[c].joinpath("deploy", "apply.json").exists() for c, _, _ in STEPS)
    assert not any(d.joinpath("deploy", "endpoints.json").exists() for d in plans.values())


@pytest.mark.engine
def test_the_real_router_hands_over_without_failing_a_request(tmp_path, monkeypatch):
    """The same `STEPS` with the real vllm-router (the engine venv's) in front of stand-in engines, while two
    clients keep sending completions through the deployment's URL: not one fails, and requests are served
    through every apply (the in-place calls, the front's switch and the old router's graceful exit are the real
    router's)."""
    from compiler.deploy import engine_env
    from compiler.deploy.apply import apply_local
    from compiler.deploy.local import prepare

    if not engine_env.ready():
        pytest.skip(f"no engine venv at {engine_env.env_dir()} (gimletc deploy --local creates it)")
    plans = _plans(tmp_path)
    fake, delay, _calls_file = _stand_in(tmp_path, monkeypatch)
    deployment = prepare(plans["running"], fake, engine_env.router_binary())
    deployment.start(60.0, lambda _m: None)
    watcher = threading.Thread(target=deployment.watch, args=(time.monotonic() + 400, lambda _m: None), daemon=True)
    watcher.start()
    url = json.loads((plans["running"] / "deploy" / "endpoints.json").read_text())["router"]
    try:
        delay.write_text("3")
        with Load(url, "m", [[1, 2, 3], [4, 5, 6, 7]], clients=4) as load:
            time.sleep(2)
            for current, nxt, _replaced in STEPS:
                start = time.monotonic()
                was = json.loads((plans[current] / "deploy" / "endpoints.json").read_text())
                message = apply_local(plans[current], plans[nxt], act=True, timeout_s=240)
                _check_applied(was, plans[current], plans[nxt], plans["running"], message)
                assert load.served_between(start, time.monotonic()) > 0, f"nothing served while applying {nxt}"
                time.sleep(1)
    finally:
        deployment.stop()
        watcher.join(timeout=30)
    assert len(load.results) > 40 and not load.failures, (len(load.results), load.failures[:5])


def test_apply_without_a_running_deployment_says_how_to_start_one(tmp_path):
    from compiler.deploy.apply import apply_local
    from compiler.ir.errors import BadInput

    for act in (True, False):
        with pytest.raises(BadInput, match="gimletc deploy .* --local"):
            apply_local(tmp_path, tmp_path / "next", act=act)


def test_deploy_refuses_a_plan_edited_after_compile_before_any_setup(tmp_path, monkeypatch):
    """`run` and `serve` refused a plan.json that no longer matched its manifest; `deploy --local` started the
    engines on it and vLLM's own pydantic traceback came back. Now the edited file is named, before the
    engine environment is even looked for."""
    from compiler.deploy import local
    from compiler.ir.errors import BadInput

    plan = compiled_plan(tmp_path, "running", DOCS)
    text = (plan / "plan.json").read_text()
    (plan / "plan.json").write_text(text.replace('"replicas": 1', '"replicas": 2', 1))
    assert (plan / "plan.json").read_text() != text
    monkeypatch.setattr(local, "engine_python", lambda _p: pytest.fail("engine set-up began before the check"))
    with pytest.raises(BadInput, match=r"plan\.json does not match its sha256.*recompile"):
        local.deploy_local(plan, for_s=1.0, progress=lambda _m: None)
    with pytest.raises(BadInput, match=r"plan\.json does not match"):
        local.prepare(plan, Path(sys.executable), Path(sys.executable))


def test_what_deploy_adds_to_each_launch_is_recorded_with_why_and_resolves_a_cpu_step(tmp_path):
    """[Note: engine latency histograms]: every engine deploy --local would start carries finer latency buckets
    than vLLM's defaults (first inter-token bucket 10 ms, where a CPU engine's steps take 3-20 ms): increasing,
    a 4 ms and a 5 ms step fall in different buckets, and no two neighbours are more than 1.5x apart from 1 ms
    to 0.1 s.
    Each flag or environment variable beyond the plan's launch is listed once, with why, and is really in the
    command or the environment. The tiny model's plan has no tokenizer: the engines get a word-level one, whose
    word tN is token N (a word it does not know is token 0), so text prompts and chat work."""
    from transformers import AutoTokenizer

    from compiler.deploy.launch import ROUTERS
    from compiler.deploy.local import prepare

    plan = compiled_plan(tmp_path, "running", DOCS)
    deployment = prepare(plan, Path(sys.executable), Path(sys.executable))
    engines = [p for p in deployment.procs if p.pool not in ROUTERS]
    assert len(engines) >= 2
    for p in engines:
        flags = {a["what"] for a in p.added}
        assert {"--enforce-eager", "--custom-histogram-buckets", "--tokenizer"} <= flags
        assert all(a["why"] for a in p.added)
        for a in p.added:
            if a["what"].startswith("--"):
                assert a["what"] in p.argv
            elif a["what"].startswith("CPU affinity "):
                assert ",".join(map(str, p.cpus)) == a["what"].removeprefix("CPU affinity ")
            else:
                key, value = a["what"].split("=", 1)
                assert p.env[key] == value
        buckets = json.loads(p.argv[p.argv.index("--custom-histogram-buckets") + 1])
        for family in ("inter_token_latency", "time_to_first_token"):
            b = buckets[family]
            assert b == sorted(set(b)) and b[0] > 0
            assert all(hi / lo <= 2.5 for lo, hi in zip(b, b[1:]) if hi <= 0.1)
        tokenizer = AutoTokenizer.from_pretrained(p.argv[p.argv.index("--tokenizer") + 1], local_files_only=True)
        vocab = json.loads((plan / "model" / "config.json").read_text())["vocab_size"]
        assert tokenizer.encode("t5 t7 hello") == [5, 7, 0] and tokenizer.decode([5, vocab - 1]) == f"t5 t{vocab - 1}"
        chat = tokenizer.apply_chat_template([{"role": "user", "content": "t3 t4"}], tokenize=True)
        assert list(chat["input_ids"] if hasattr(chat, "keys") else chat) == [3, 4]
        itl = buckets["inter_token_latency"]
        assert sum(1 for x in itl if 0.004 <= x < 0.005) >= 1 and max(hi / lo for lo, hi in zip(itl, itl[1:])
                                                                    if lo >= 0.001 and hi <= 0.1) <= 1.5
