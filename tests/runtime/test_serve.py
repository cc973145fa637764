"""`gimletc serve` of a split plan: the official openai client streams HF's greedy tokens; /metrics parses."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, pod_processes
from tests.runtime.conftest import NEW_TOKENS, PROMPTS, hf_reference


def _wait_healthy(base: str, proc, timeout_s: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("server did not become healthy")


@pytest.fixture(scope="module")
def served(llama_split, tmp_path_factory):
    """`gimletc serve` of the split plan, started once for this module's tests of one server: (url, the first line
    it printed, the /health status code read as soon as that line was printed)."""
    import threading

    import httpx

    from compiler.runtime.launch import free_port

    port = free_port()
    stderr = tmp_path_factory.mktemp("serve") / "stderr.txt"
    proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", "serve", str(llama_split), "--port", str(port)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=stderr.open("w"), text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    url = f"http://127.0.0.1:{port}"
    lines: list[str] = []
    health: list[int] = []

    def read_first_line():
        lines.append(proc.stdout.readline())
        try:  # answering when it said so, not later
            health.append(httpx.get(f"{url}/health", timeout=5).status_code)
        except httpx.HTTPError as e:
            health.append(repr(e))

    reader = threading.Thread(target=read_first_line, daemon=True)
    reader.start()
    try:
        reader.join(timeout=150)
        assert lines and lines[0], "serve printed nothing" + (f": {stderr.read_text()[-2000:]}"
                                                              if proc.poll() is not None else "")
        yield url, lines[0], health[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.timeout(240)
def test_openai_client_streams_hf_tokens_and_metrics_parse(llama_split, served):
    import httpx
    from openai import OpenAI
    from prometheus_client.parser import text_string_to_metric_families

    base, _, _ = served
    client = OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    assert client.models.list().data[0].id == "llama-tiny"
    prompt = PROMPTS[3]
    stream = client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=NEW_TOKENS, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    got, usage = [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            got += [int(t) for t in choice.text.split()]
    want, _ = hf_reference(llama_split / "model", [prompt], NEW_TOKENS)[0]
    assert got == want
    assert usage.completion_tokens == NEW_TOKENS and usage.prompt_tokens == len(prompt)

    chat = client.chat.completions.create(model="llama-tiny", temperature=0, max_tokens=4,
                                          messages=[{"role": "user", "content": " ".join(map(str, prompt))}])
    assert [int(t) for t in chat.choices[0].message.content.split()] == want[:4]

    raw = httpx.post(f"{base}/v1/completions", json={"prompt": prompt, "max_tokens": 2, "stream": True,
                                                     "temperature": 0}, timeout=60).text
    assert raw.rstrip().endswith("data: [DONE]")

    text = httpx.get(f"{base}/metrics", timeout=10).text
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert "vllm:num_requests_waiting" in names and "gimletc_time_to_first_token_seconds_bucket" in names
    assert any(n.startswith("gimletc_transfer_bytes") for n in names)
    assert httpx.post(f"{base}/v1/completions", json={"prompt": "no tokenizer here"}, timeout=10).status_code == 400


def _pod_envs(plan_dir) -> tuple[dict, list[dict]]:
    """The driver's and every worker's environment, as the plan's Kubernetes manifests declare them."""
    from compiler.emit.k8s.manifests import manifests
    from compiler.plan.checks import load_plan

    procs = list(pod_processes(manifests(load_plan(plan_dir))))
    (driver,) = [env for env, cmd in procs if cmd[:2] == ["gimletc", "serve"]]
    return driver, [env for env, cmd in procs if "compiler.runtime.worker" in cmd]


@pytest.mark.timeout(240)
def test_serve_waits_for_external_workers_started_with_the_manifests_environment(llama_split):
    """The Kubernetes path without Kubernetes: `gimletc serve` as the driver pod runs it (RANK=0, WORLD_SIZE,
    MASTER_PORT from its manifest), the workers as separate processes with their pods' environment."""
    from openai import OpenAI

    from compiler.emit.k8s.manifests import DRIVER_COMMAND, PLAN_DIR, WORKER_COMMAND
    from compiler.plan.topology import world_size
    from compiler.plan.checks import load_plan
    from compiler.runtime.launch import free_port

    driver_env, worker_envs = _pod_envs(llama_split)
    assert driver_env["RANK"] == "0" and len(worker_envs) + 1 == world_size(load_plan(llama_split))
    rendezvous, http = free_port(), free_port()
    local = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(rendezvous)}  # the driver's Service, on this machine
    base_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    command = [str(llama_split) if a == PLAN_DIR else a for a in DRIVER_COMMAND[1:]]
    command[command.index("--port") + 1] = str(http)
    driver = subprocess.Popen([sys.executable, "-m", "compiler.cli", *command], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              env={**base_env, **driver_env, **local, "PYTHONWARNINGS": "ignore"})
    worker_cmd = [sys.executable, *[str(llama_split) if a == PLAN_DIR else a for a in WORKER_COMMAND[1:]]]
    workers = [subprocess.Popen(worker_cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**base_env, **env, **local}) for env in worker_envs]
    base = f"http://127.0.0.1:{http}"
    try:
        _wait_healthy(base, driver, timeout_s=150)
        client = OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        prompt = PROMPTS[5]
        stream = client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=NEW_TOKENS, temperature=0,
                                           stream=True)
        got = [int(t) for chunk in stream for choice in chunk.choices for t in choice.text.split()]
        assert got == hf_reference(llama_split / "model", [prompt], NEW_TOKENS)[0][0]
    finally:
        driver.terminate()
        driver.wait(timeout=30)
        codes = []
        for w in workers:
            try:
                codes.append(w.wait(timeout=20))
            except subprocess.TimeoutExpired:
                w.kill()
                codes.append("still running")
    assert codes == [0] * len(workers)  # the driver stopped them on shutdown


@pytest.mark.timeout(240)
def test_serve_prints_its_url_once_it_answers(llama_split, served):
    """`gimletc serve` once said nothing when it was ready. It prints its URL on stdout once the server
    answers there (the server `served` started: /health read as soon as the line was printed)."""
    url, line, health = served
    assert f"at {url} " in line and str(llama_split) in line, line
    assert health == 200  # answering when it said so, not later
