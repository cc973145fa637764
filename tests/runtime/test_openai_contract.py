"""The OpenAI contract of `gimletc serve`, in-process: validation at the door, failures that stay local, what the
official openai client sends (n, stop, logprobs, seeds, batch prompts, chat templates), and a fuzz of the HTTP API.

One engine serves the whole module (`served`); two apps sit on it: the plan as compiled (no tokenizer, prompts are
token ids) and the same plan seen with a tiny WordLevel tokenizer that has a chat template.
"""

from __future__ import annotations

import json

import pytest

from tests.runtime.conftest import PROMPTS, hf_reference

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _tiny_tokenizer(folder):
    """A `PreTrainedTokenizerFast` over words w0 .. w99 and the chat markers, saved to `folder` (ids < 512)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"] + [f"w{i}" for i in range(100)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return fast


@pytest.fixture(scope="module")
def served(llama_split, tmp_path_factory):
    from fastapi.testclient import TestClient

    from compiler.runtime.serve import ServingLoop, build_app

    loop = ServingLoop(llama_split)
    with_tokenizer = tmp_path_factory.mktemp("with-tokenizer")
    tokenizer = _tiny_tokenizer(with_tokenizer / "model")
    try:
        yield {"loop": loop, "plan": llama_split, "tokenizer": tokenizer,
               "http": TestClient(build_app(loop, llama_split, "llama-tiny")),
               "http_tok": TestClient(build_app(loop, with_tokenizer, "llama-tiny"))}
    finally:
        loop.close()


def _client(http):
    from openai import OpenAI

    return OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)


def _assert_openai_error(r, status: int, param=None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    if param is not None:
        assert err["param"] == param
    return err


@pytest.mark.timeout(120)
def test_bad_values_get_openai_400s_and_the_next_request_succeeds(served):
    http = served["http"]
    prompt = PROMPTS[1]
    for body, param in (({"prompt": [1, 2], "max_tokens": 2, "top_p": 0}, "top_p"),
                        ({"prompt": [1, 2], "temperature": -1}, "temperature"),
                        ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
                        ({"prompt": [1, 2], "max_tokens": -1}, "max_tokens"),
                        ({"prompt": [1, 2], "max_tokens": "abc"}, "max_tokens"),
                        ({"prompt": [1, 2], "n": 0}, "n"),
                        ({"prompt": [1, 2], "echo": True}, "echo"),
                        ({"prompt": [1, 2], "stop": "not ids"}, "stop"),
                        ({"prompt": [1, 10 ** 6]}, "prompt"),
                        ({"messages": []}, "messages")):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        _assert_openai_error(http.post(path, json=body), 400, param)
    _assert_openai_error(http.post("/v1/completions", content=b"{not json", headers={"content-type":
                                                                                     "application/json"}), 400)
    assert _assert_openai_error(http.post("/v1/completions", json={"model": "gpt-4", "prompt": [1]}), 404,
                                "model")["code"] == "model_not_found"
    _assert_openai_error(http.get("/v1/nothing-here"), 404)
    r = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == hf_reference(
        served["plan"] / "model", [prompt], 3)[0][0]
    assert http.get("/health").json() == {"status": "ok"}


@pytest.mark.timeout(120)
def test_a_request_failing_inside_the_engine_fails_alone(served, monkeypatch):
    import compiler.runtime.engine as engine_module

    real = engine_module.sample

    def flaky(logits, *, temperature, top_p, generator):
        if top_p == 0.123:  # the marked request's sampling raises, as a NaN top_p once did
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return real(logits, temperature=temperature, top_p=top_p, generator=generator)

    monkeypatch.setattr(engine_module, "sample", flaky)
    http = served["http"]
    err = _assert_openai_error(http.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 4,
                                                                  "temperature": 1, "top_p": 0.123}), 500)
    assert err["code"] == "request_failed" and "nan" in err["message"]
    assert http.get("/health").status_code == 200
    r = http.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 4


@pytest.mark.timeout(180)
def test_openai_client_n_stop_logprobs_seeds_and_max_tokens(served):
    import openai
    import torch

    client = _client(served["http"])
    prompt = PROMPTS[2]
    (want, logits), = hf_reference(served["plan"] / "model", [prompt], 6)

    two = client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=6, temperature=0, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert [[int(t) for t in c.text.split()] for c in two.choices] == [want, want]
    assert two.usage.prompt_tokens == len(prompt) and two.usage.completion_tokens == 12

    stop = f"{want[2]} {want[3]}"  # a two-token stop sequence: generation ends there, without it
    stopped = client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=6, temperature=0, stop=[stop])
    seq = next(i for i in range(len(want) - 1) if want[i:i + 2] == want[2:4])  # where it first occurs
    assert [int(t) for t in stopped.choices[0].text.split()] == want[:seq]
    assert stopped.choices[0].finish_reason == "stop"

    lp = client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=6, temperature=0, logprobs=2).choices[0]
    reference = [torch.log_softmax(row.float(), -1) for row in logits]
    assert [int(t) for t in lp.logprobs.tokens] == want
    assert lp.logprobs.token_logprobs == pytest.approx([float(r[t]) for r, t in zip(reference, want)], abs=1e-4)
    assert all(len(top) == 2 and max(top.values()) == pytest.approx(float(r.max()), abs=1e-4)
               for top, r in zip(lp.logprobs.top_logprobs, reference))
    chat = client.chat.completions.create(model="llama-tiny", max_tokens=3, temperature=0, logprobs=True,
                                          top_logprobs=1, messages=[{"role": "user", "content": str(prompt)[1:-1]}])
    assert [int(e.token) for e in chat.choices[0].logprobs.content] == want[:3]

    def sampled(**kw):
        return client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=8, temperature=1,
                                         **kw).choices[0].text

    assert sampled() != sampled()  # no seed: a fresh one each time
    assert sampled(seed=7) == sampled(seed=7)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="llama-tiny", prompt=prompt, max_tokens=0)
    assert err.value.body["param"] == "max_tokens"


@pytest.mark.timeout(120)
def test_batch_prompts_and_streams_of_n_choices(served):
    http = served["http"]
    prompts = [PROMPTS[0], PROMPTS[4]]
    want = [tokens for tokens, _ in hf_reference(served["plan"] / "model", prompts, 4)]
    r = http.post("/v1/completions", json={"prompt": prompts, "max_tokens": 4, "temperature": 0}).json()
    assert [c["token_ids"] for c in r["choices"]] == want
    assert r["usage"]["prompt_tokens"] == sum(map(len, prompts))

    client = _client(http)
    got: dict[int, list[int]] = {0: [], 1: []}
    for chunk in client.completions.create(model="llama-tiny", prompt=prompts[1], max_tokens=4, temperature=0, n=2,
                                           stop=[str(want[1][2])], stream=True):
        for c in chunk.choices:
            got[c.index] += [int(t) for t in c.text.split()]
    assert got == {0: want[1][:want[1].index(want[1][2])], 1: want[1][:want[1].index(want[1][2])]}


@pytest.mark.timeout(120)
def test_chat_applies_the_template_to_every_message_or_refuses_clearly(served):
    import torch
    from transformers import AutoModelForCausalLM

    messages = [{"role": "system", "content": "w1 w2"}, {"role": "user", "content": "w3 w4 w5"},
                {"role": "assistant", "content": "w6"}, {"role": "user", "content": "w7 w8"}]
    err = _assert_openai_error(served["http"].post("/v1/chat/completions", json={"messages": messages}), 400,
                               "messages")
    assert "chat template" in err["message"]

    tok = served["tokenizer"]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    model = AutoModelForCausalLM.from_pretrained(str(served["plan"] / "model"), dtype=torch.float32).eval()
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)[0, len(ids):].tolist()
    r = served["http_tok"].post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4,
                                                              "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == want and r.json()["usage"]["prompt_tokens"] == len(ids)


def _bodies():
    from hypothesis import strategies as st

    junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10 ** 20), st.floats(allow_nan=True),
                     st.text(max_size=6), st.lists(st.integers(-2, 600), max_size=4), st.dictionaries(
                         st.text(max_size=3), st.integers(), max_size=2))
    ids = st.lists(st.integers(-2, 520), max_size=5)
    prompt = st.one_of(ids, st.lists(ids, max_size=3), st.text(max_size=8), st.lists(st.text(max_size=6), max_size=2),
                       junk)
    message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "bot"]),
                                     "content": st.one_of(st.text(max_size=8), st.just("1 2 3"), junk)})
    fields = {
        "model": st.one_of(st.just("llama-tiny"), st.text(max_size=5), junk),
        "max_tokens": st.one_of(st.integers(-2, 3), st.just(10 ** 9), junk),
        "temperature": st.one_of(st.floats(-1, 3), junk), "top_p": st.one_of(st.floats(-0.5, 1.5), junk),
        "n": st.one_of(st.integers(-1, 3), st.just(10 ** 4), junk), "seed": st.one_of(st.integers(), junk),
        "stop": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=5), junk),
        "logprobs": st.one_of(st.integers(-1, 6), st.booleans(), junk), "top_logprobs": st.one_of(st.integers(-1, 21),
                                                                                                   junk),
        "stream": st.booleans(), "stream_options": st.one_of(st.just({"include_usage": True}), junk),
        "echo": st.one_of(st.booleans(), junk), "ignore_eos": st.booleans(),
    }
    completion = st.fixed_dictionaries({"prompt": prompt, "max_tokens": fields["max_tokens"]},
                                       optional={k: v for k, v in fields.items() if k != "max_tokens"})
    chat = st.fixed_dictionaries({"messages": st.one_of(st.lists(message, max_size=3), junk),
                                  "max_tokens": fields["max_tokens"]},
                                 optional={k: v for k, v in fields.items() if k != "max_tokens"})
    raw = st.one_of(st.binary(max_size=20), st.text(max_size=20).map(str.encode))
    # valid requests too, so the fuzz exercises the success path whatever order hypothesis draws in
    valid = st.fixed_dictionaries({"prompt": st.lists(st.integers(3, 500), min_size=1, max_size=5),
                                   "max_tokens": st.integers(1, 3)},
                                  optional={"temperature": st.floats(0, 2), "seed": st.integers(0, 2 ** 31)})
    return st.tuples(st.sampled_from(["/v1/completions", "/v1/chat/completions"]),
                     st.one_of(valid, completion, chat, junk, raw))


@pytest.mark.timeout(300)
def test_fuzzed_requests_never_get_a_5xx_nor_wedge_the_server(served):
    from hypothesis import HealthCheck, given, settings

    http = served["http"]
    seen = []

    @settings(max_examples=500, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(_bodies())
    def check(case):
        path, body = case
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = http.post(path, content=content, headers={"content-type": "application/json"})
        seen.append(r.status_code)
        assert r.status_code < 500, (body, r.text)
        if not r.headers["content-type"].startswith("text/event-stream"):
            assert ("error" in r.json()) == (r.status_code >= 400), r.text

    check()
    assert len(seen) >= 500 and 200 in seen and 400 in seen
    assert http.get("/health").json() == {"status": "ok"}
    r = http.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 2


@pytest.mark.timeout(120)
def test_when_the_engine_cannot_go_on_health_turns_503(served, monkeypatch):
    """Last in this module: it breaks the module's engine."""
    loop = served["loop"]

    def broken():
        raise RuntimeError("scheduler state lost")

    monkeypatch.setattr(loop.engine, "step", broken)
    http = served["http"]
    err = _assert_openai_error(http.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 2}), 503)
    assert err["code"] == "engine_failed" and "scheduler state lost" in err["message"]
    assert loop.failed.wait(30)
    assert _assert_openai_error(http.get("/health"), 503)["code"] == "engine_failed"
    _assert_openai_error(http.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 2}), 503)
