"""``gimletc replan`` reading several engines at once ([Note: rounds of scrapes] in
compiler/replan/metrics.py): the examples/cpu_pd split (one prefill and one decode engine) read through stand-in
engines that serve vLLM's /metrics text, with the requests each one served known, and through saved scrapes of
them. The expected rates and latencies are worked by hand from what each stand-in served between its own two
scrapes, never read back from the code under test."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.deploy.helpers import DOCS

CLUSTER = REPO / "examples" / "cpu_pd" / "cluster.yaml"

#: vLLM's histogram buckets (vllm/v1/metrics/loggers.py; token counts for a 2048-token context).
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
PHASE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0)


@dataclass(frozen=True)
class Request:
    """One finished request as an engine's histograms record it."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    itl_s: float  # every gap between its output tokens
    queue_s: float = 0.01
    prefill_s: float = 0.06


def vllm_metrics(served: list[Request]) -> str:
    """What vLLM's /metrics says after serving `served` (cumulative, no sample timestamps, idle now)."""
    labels = 'engine="0",model_name="llama-mini"'
    lines = ["# HELP vllm:request_success_total Count of successfully processed requests.",
             "# TYPE vllm:request_success_total counter",
             f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(len(served))}',
             f'vllm:request_success_total{{{labels},finished_reason="stop"}} 0.0']
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        lines += [f"# TYPE {name} gauge", f"{name}{{{labels}}} 0.0"]

    def histogram(name: str, buckets, values: list[float]) -> None:
        lines.append(f"# TYPE {name} histogram")
        for le in buckets:
            lines.append(f'{name}_bucket{{{labels},le="{float(le)}"}} {float(sum(v <= le for v in values))}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(len(values))}')
        lines.append(f"{name}_count{{{labels}}} {float(len(values))}")
        lines.append(f"{name}_sum{{{labels}}} {float(sum(values))}")

    histogram("vllm:request_prompt_tokens", TOKEN_BUCKETS, [r.prompt_tokens for r in served])
    histogram("vllm:request_generation_tokens", TOKEN_BUCKETS, [r.output_tokens for r in served])
    histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS, [r.ttft_s for r in served])
    histogram("vllm:inter_token_latency_seconds", ITL_BUCKETS,
              [r.itl_s for r in served for _ in range(r.output_tokens - 1)])
    histogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS,
              [r.itl_s for r in served if r.output_tokens > 1])
    histogram("vllm:request_queue_time_seconds", PHASE_BUCKETS, [r.queue_s for r in served])
    histogram("vllm:request_prefill_time_seconds", PHASE_BUCKETS, [r.prefill_s for r in served])
    return "\n".join(lines) + "\n"


#: What each engine served before the first scrape (since it started) and between its two scrapes: 60 + 42 = 102
#: requests since the engines started, as in the issue. The earlier requests ran slower (a 300 ms prefill, 50 ms a
#: token) than the new ones (60 ms, 1 ms: near what the plan predicts, 66 ms and 0.7 ms, so the replan's SLO
#: check passes), so a latency read from the window's own requests is told from one since the engines started.
PREFILL_BEFORE = [Request(700, 1, 0.4, 0.0, prefill_s=0.3)] * 60
PREFILL_NEW = [Request(800, 1, 0.08, 0.0)] * 3
DECODE_BEFORE = [Request(700, 16, 0.05, 0.050)] * 42
DECODE_NEW = [Request(800, 16, 0.04, 0.001)] * 3


class StandIn:
    """An engine's /metrics on a local port: its k-th scrape gets ``texts[k]`` (the last one after that), and the
    time each scrape was answered is kept."""

    def __init__(self, texts: list[str]):
        self.texts, self.times = texts, []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = stand_in.texts[min(len(stand_in.times), len(stand_in.texts) - 1)].encode()
                stand_in.times.append(time.time())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """(plan directory, prefill pool, decode pool) of examples/cpu_pd's split (long prompts, short answers)."""
    import yaml

    from compiler.compile_inputs import CompileInputs
    from compiler.driver import compile
    from compiler.ir.files import atomic_write_text

    tmp = tmp_path_factory.mktemp("cpu-pd")
    workload = tmp / "docs.yaml"
    workload.write_text(yaml.safe_dump(DOCS))
    c = compile("llama-mini", str(CLUSTER), str(workload), baselines=False, analyse=False)
    roles = {p.role: p.name for p in c.plan.pools}
    assert sorted(roles) == ["decode", "prefill"], roles  # the split this file is about
    out = tmp / "plan"
    atomic_write_text(out / "plan.json", c.plan.dumps())
    atomic_write_text(out / "report" / "inputs.json", CompileInputs.of("llama-mini", CLUSTER, workload).to_json())
    return out, roles["prefill"], roles["decode"]


def _replan(capsys, *args: str) -> tuple[int, str, str]:
    from compiler.cli.main import main

    code = main(["replan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _check_measured(summary: dict, prefill: str, decode: str, prefill_s: float, decode_s: float) -> None:
    """The replan's measurements are what the stand-ins served over their own seconds between scrapes."""
    obs = summary["observation"]
    pools = {p["pool"]: p for p in obs["pools"]}
    (docs,) = obs["classes"]
    assert docs["requests_per_s"] == pytest.approx(len(PREFILL_NEW) / prefill_s, rel=1e-2)
    assert dict(pools[prefill]["arrivals_per_s"])["docs"] == pytest.approx(len(PREFILL_NEW) / prefill_s, rel=1e-2)
    assert dict(pools[decode]["arrivals_per_s"])["docs"] == pytest.approx(len(DECODE_NEW) / decode_s, rel=1e-2)
    # TPOT: the inter-token latency of the window's own tokens (3 requests of 15 gaps at 1 ms); prefill 60 ms
    assert pools[decode]["tpot"]["mean_s"] == pytest.approx(0.001)
    assert pools[prefill]["prefill"]["mean_s"] == pytest.approx(0.06)
    assert docs["input_mean"] == pytest.approx(800)
    fitted = {p["pool"]: p for p in summary["pools"]}
    assert fitted[decode]["note"] != "no requests recognised"
    assert fitted[decode]["tpot"] is not None and fitted[decode]["tpot"]["measured_s"] == pytest.approx(0.001)


def test_two_engine_urls_read_as_one_round_each(plan, capsys):
    """``--metrics POOL=URL`` twice, as a user reads a prefill and a decode engine: each URL scraped twice, a
    second apart; the rates are what each engine served between its own two scrapes over its own seconds."""
    plan_dir, prefill, decode = plan
    engines = {prefill: StandIn([vllm_metrics(PREFILL_BEFORE), vllm_metrics(PREFILL_BEFORE + PREFILL_NEW)]),
               decode: StandIn([vllm_metrics(DECODE_BEFORE), vllm_metrics(DECODE_BEFORE + DECODE_NEW)])}
    try:
        code, out, err = _replan(capsys, str(plan_dir), "--metrics", f"{prefill}={engines[prefill].url}",
                                 "--metrics", f"{decode}={engines[decode].url}", "--scrape-interval", "1s", "--json")
    finally:
        for e in engines.values():
            e.close()
    assert code == 0, err
    spans = {pool: e.times[1] - e.times[0] for pool, e in engines.items()}
    assert all(len(e.times) == 2 for e in engines.values())
    _check_measured(json.loads(out), prefill, decode, spans[prefill], spans[decode])


@pytest.mark.parametrize("roles", [("prefill",), ("decode", "prefill")])
def test_idle_engines_are_no_traffic(plan, capsys, roles):
    """Engines that served 102 requests before the first scrape and none since: no requests in the window, exit 2
    naming the metrics, with the prefill engine alone (as before) or both engines (the issue: the decode engine's
    URL first read as 10 req/s, the prefill engine's requests since it started over the seconds between scrapes)."""
    plan_dir, prefill, decode = plan
    stand_ins = {prefill: StandIn([vllm_metrics(PREFILL_BEFORE)]), decode: StandIn([vllm_metrics(DECODE_BEFORE)])}
    pools = [{"prefill": prefill, "decode": decode}[r] for r in roles]
    try:
        args = [a for pool in pools for a in ("--metrics", f"{pool}={stand_ins[pool].url}")]
        code, _out, err = _replan(capsys, str(plan_dir), *args, "--scrape-interval", "0.5s")
    finally:
        for e in stand_ins.values():
            e.close()
    assert code == 2, err
    assert "--metrics: no requests were recognised" in err


def _saved(folder: Path, name: str, text: str, t_s: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    os.utime(path, (t_s, t_s))
    return path


@pytest.mark.parametrize("layout", ["files", "folders"])
def test_saved_scrapes_of_two_engines(plan, capsys, tmp_path, layout):
    """Saved scrapes of the two engines, each stamped when it was taken (its modification time): the prefill
    engine's 600 s apart, the decode engine's 0.25 s later and 590 s apart. Given one file at a time
    (``POOL=FILE``) or as a folder per engine (``POOL=FOLDER``), each engine's rate is over its own 600 or 590 s."""
    plan_dir, prefill, decode = plan
    t0 = 1_700_000_000.0
    scrapes = {prefill: [(t0, PREFILL_BEFORE), (t0 + 600, PREFILL_BEFORE + PREFILL_NEW)],
               decode: [(t0 + 0.25, DECODE_BEFORE), (t0 + 590.25, DECODE_BEFORE + DECODE_NEW)]}
    args = []
    for pool, taken in scrapes.items():
        paths = [_saved(tmp_path / pool, f"{i}.prom", vllm_metrics(served), t) for i, (t, served) in enumerate(taken)]
        args += [a for p in paths for a in ("--metrics", f"{pool}={p}")] if layout == "files" else \
            ["--metrics", f"{pool}={tmp_path / pool}"]
    code, out, err = _replan(capsys, str(plan_dir), *args, "--json")
    assert code == 0, err
    _check_measured(json.loads(out), prefill, decode, 600.0, 590.0)


def test_each_replica_is_subtracted_on_its_own(tmp_path):
    """Two replicas of one pool saved one file each per round, the files of a round stamped alike (as
    tools/replay.py writes them): replica a finished 100 -> 200 requests, replica b restarted between the rounds
    (50 -> 10). The pool finished 100 + 10 = 110 in the 60 s; summing the replicas first (150 -> 210) would read
    60, b's reset hidden by a's growth."""
    from compiler.replan.metrics import load, window

    t0 = 1_700_000_000.0
    counts = {"a": (100, 200), "b": (50, 10)}
    args = []
    for k in (0, 1):
        for replica, served in counts.items():
            path = _saved(tmp_path, f"r{k}-pool0-{replica}.prom",
                          vllm_metrics([Request(700, 16, 0.05, 0.02)] * served[k]), t0 + 60 * k)
            args.append(f"pool0={path}")
    w = window(load(args), 600)
    assert w.seconds == pytest.approx(60)
    assert w.counter("requests", "pool0") == pytest.approx(100 + 10)
    assert w.histogram("prompt_len", "pool0").count == pytest.approx(110)
    assert w.unpaired == ()


def test_an_engine_without_an_earlier_scrape_is_counted_since_it_started_and_named(tmp_path, caplog):
    """A third replica whose only scrape is the last round's (started inside the window, or its earlier files
    given under another source): its 7 requests since it started are the window's, and the warning names its
    file and how to give its scrapes."""
    from compiler.replan.metrics import load, window

    t0 = 1_700_000_000.0
    served = lambda n: vllm_metrics([Request(700, 16, 0.05, 0.02)] * n)  # noqa: E731
    args = [f"pool0={_saved(tmp_path, f'r{k}-pool0-a.prom', served(n), t0 + 60 * k)}" for k, n in ((0, 100), (1, 130))]
    late = _saved(tmp_path, "r1-pool0-c.prom", served(7), t0 + 60)
    with caplog.at_level("WARNING", logger="compiler.replan.metrics"):
        w = window(load([*args, f"pool0={late}"]), 600)
    assert w.counter("requests", "pool0") == pytest.approx(30 + 7)
    assert w.unpaired == (str(late),)
    (record,) = [r for r in caplog.records if r.name == "compiler.replan.metrics"]
    assert str(late) in record.getMessage() and "no earlier scrape" in record.getMessage()
