"""Two services (two tiny models) compiled together (`compile --services`) and deployed on real vLLM engines here
behind one gateway (vllm-router in inference-gateway mode): each request reaches the model it names.

Marked ``engine`` (CI runs them after the default suite): two engines take minutes to start on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.conftest import REPO

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

MODELS = {"mini": "llama-mini", "small": "qwen3-tiny"}
PROMPTS = [[(13 * i + 5 * j) % 500 + 3 for j in range(40 + 31 * i)] for i in range(3)]
NEW_TOKENS = 8
TIE = 2.0 ** -6  # a bf16 near-tie of the tiny random models' logits (tests/deploy/test_local_engines.py)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("services")
    (tmp / "cluster.yaml").write_text(yaml.safe_dump({"name": "two-cpus", "devices": [
        {"device": "cpu-host", "count": 2, "engine": "vllm"}]}))
    (tmp / "workload.yaml").write_text(yaml.safe_dump({"name": "short", "arrival_rate_per_s": "maximise", "classes": [
        {"name": "short", "share": 1, "input_len": {"mean": 100, "max": 200}, "output_len": {"mean": 16, "max": 32}}],
        "slo": {"ttft_ms": 20000, "tpot_ms": 1000}}))
    (tmp / "services.yaml").write_text(yaml.safe_dump({"name": "two-tiny", "services": [
        {"name": name, "model": model, "workload": "workload.yaml"} for name, model in MODELS.items()]}))
    out = tmp / "plan"
    done = subprocess.run([sys.executable, "-m", "compiler.cli", "compile", "--services", str(tmp / "services.yaml"),
                           "--cluster", str(tmp / "cluster.yaml"), "--out", str(out), "--no-onnx", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", "deploy", str(out), "--local"], cwd=REPO,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    endpoints = out / "deploy" / "endpoints.json"
    deadline = time.monotonic() + 1500
    while not endpoints.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "deployment not ready after 1500 s"
        time.sleep(2)
    yield out, json.loads(endpoints.read_text())
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    assert not endpoints.exists()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def test_each_service_got_a_device_of_its_own(deployed):
    out, _info = deployed
    doc = json.loads((out / "services.json").read_text())
    assert {s["name"]: s["devices"] for s in doc["services"]} == {"mini": {"cpu-host": 1}, "small": {"cpu-host": 1}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_token_prompts_naming_a_model_get_that_models_greedy_tokens(deployed, name):
    """Teacher-forced on the engine's own output, each token is Hugging Face's greedy choice of the model named
    (its weights as the plan wrote them), and not the other model's."""
    import torch
    from transformers import AutoModelForCausalLM

    out, info = deployed
    models = {n: AutoModelForCausalLM.from_pretrained(str(out / n / "model"), dtype=torch.float32).eval()
              for n in MODELS}
    misses = {n: 0 for n in MODELS}
    with torch.no_grad():
        for prompt in PROMPTS:
            answer = _post(info["router"], {"model": name, "prompt": prompt, "max_tokens": NEW_TOKENS,
                                            "temperature": 0, "return_token_ids": True, "ignore_eos": True})
            tokens = answer["choices"][0]["token_ids"]
            assert len(tokens) == NEW_TOKENS and answer["model"] == name
            for n, model in models.items():
                logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
                misses[n] += sum((row.max() - row[t]).item() > TIE for row, t in zip(logits, tokens))
    other = next(n for n in MODELS if n != name)
    assert misses[name] == 0 and misses[other] > 0, misses


def test_a_text_prompt_naming_each_model_gets_text(deployed):
    _out, info = deployed
    for name in MODELS:
        text = _post(info["router"], {"model": name, "prompt": "t17 t42 hello " * 10, "max_tokens": NEW_TOKENS,
                                      "temperature": 0, "ignore_eos": True})["choices"][0]["text"]
        assert len(text.split()) == NEW_TOKENS, (name, text)


def test_a_request_naming_an_unknown_model_gets_the_openai_404(deployed):
    _out, info = deployed
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(info["router"], {"model": "no-such-model", "prompt": [5, 6, 7], "max_tokens": 2})
    assert e.value.code == 404
    error = json.loads(e.value.read())["error"]
    assert "no-such-model" in error["message"] and error["code"] == 404, error
