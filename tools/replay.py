"""Replay a timestamped request trace through a deployment of a plan, with and without replanning.

The trace is the Azure LLM inference trace's CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``, one request a
row; github.com/Azure/AzurePublicDataset AzureLLMInferenceDataset2023), or a generated day whose mix shifts from
chat by day to long documents by night (``--generate-day FILE``; ``examples/replan/day_trace.csv`` is one, a
day compressed to 15 s an hour).

The deployment is simulated (`compiler.replan.simulate`): the trace is cut into windows of ``--window``; each
request joins the compiled workload's class nearest its prompt length (in log space), and each window's class
rates drive the simulated engines, which write their Prometheus metrics. Two runs over the same trace:

- ``static``: the plan as compiled, all day;
- ``replan``: after each window, ``gimletc replan``'s own function reads the metrics since the last change and,
  when its decision acts, the deployment runs the next plan from the next window (its metrics start afresh).

Printed per window: the class rates, the SLO attainment (share of requests meeting both targets) and the mean
power of each run, and the replans made; then the day's totals (requests meeting their SLO, attainment, energy,
replans, and flaps: changes undone within two windows, `reversals`) and the forecast's one-step error on the
trace's windows (Holt against the last value,
`compiler.replan.forecast.errors`). All latencies and powers are the simulation's (the cost model's predictions,
as the simulation's module docstring states), not measurements. A replanned plan's new shapes behave as the
cost model predicts them for the workload the replan measured. ``--cooldown`` and ``--forecast-error-weight``
are ``gimletc replan``'s anti-flap settings, for both paths (``0`` turns each off).

With ``--endpoints DIR/deploy/endpoints.json`` (a running ``gimletc deploy DIR --local``) the trace is sent to
the real engines instead, time-compressed by ``--speed``: each request a prompt of random token ids of its
length (capped by ``--max-prompt``; random, so vLLM's prefix cache does not serve it) with ``max_tokens`` its
output length (capped by ``--max-output``) and ``ignore_eos``, streamed from the router, open loop (a request
is sent at its time whatever the others do). Per request: served (every token streamed) or failed, TTFT and
TPOT at the client, and whether it met ``--slo-ttft-s`` and ``--slo-tpot-s``. Every engine's /metrics is
scraped at every window's end into ``--scrapes DIR`` (the files of one scrape share one modification time, so
the metrics reader merges them). With ``--apply``, after each window ``gimletc replan CURRENT --metrics
POOL=FILE ... --out SCRAPES/../replan-wNN --apply`` runs in the background on the scrapes since the last
change (one at a time; the trace goes on while engines restart); ``--advise`` runs the same replans without
``--apply`` (what they would have moved). Give ``--plan DIR`` and, for a plan compiled with ``--no-report``,
``--cluster`` and ``--workload``. Printed and written to ``--json``: per window (by trace arrival) requests
sent, served, failed and meeting the SLO, the median TTFT and TPOT, and the replan's decision; then the
totals. Engines take minutes to start here (FIELD_NOTES), so that path is not part of the tests.

    .venv/bin/python tools/replay.py --plan PLAN_DIR --trace examples/replan/day_trace.csv --window 15s
    .venv/bin/python tools/replay.py --generate-day examples/replan/day_trace.csv
    .venv/bin/python tools/replay.py --generate-shift examples/replan/cpu_day_trace.csv   # 8 windows of 45 s
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
START = datetime(2026, 1, 1)


@dataclass(frozen=True, slots=True)
class Request:
    t_s: float  # seconds after the trace's first request
    prompt_tokens: int
    output_tokens: int


def read_trace(path: str | Path) -> list[Request]:
    """The trace's requests, oldest first; a file without Azure's columns is refused naming them."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"{path}: no column {', '.join(missing)}; the Azure LLM inference trace format is "
                             f"{','.join(AZURE_COLUMNS)}")
        rows = [(_time(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in reader]
    rows.sort()
    if not rows:
        raise SystemExit(f"{path}: no requests")
    t0 = rows[0][0]
    return [Request((t - t0).total_seconds(), p, o) for t, p, o in rows]


def _time(text: str) -> datetime:
    """Azure's timestamps carry 7 fractional digits; Python reads 6."""
    head, _, frac = text.strip().partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}" if frac else head)


def generate_day(path: str | Path, *, seconds_per_hour: float = 15.0, chat_peak_per_s: float = 40.0,
                 docs_peak_per_s: float = 12.0, seed: int = 0) -> int:
    """Write a day with a shifting mix: chat peaks at 14:00 (mean prompt 512, output 256), long documents at
    02:00 (mean prompt 6000, output 128), each hour compressed to `seconds_per_hour`; Poisson arrivals at the
    hour's rate, lengths uniform around the class means. Returns the rows written."""
    periods = []
    for hour in range(24):
        day = 0.5 * (1 + math.cos(2 * math.pi * (hour - 14) / 24))  # 1 at 14:00, 0 at 02:00
        rates = {"chat": chat_peak_per_s * (0.1 + 0.9 * day), "docs": docs_peak_per_s * (0.1 + 0.9 * (1 - day))}
        periods.append((hour * seconds_per_hour, (hour + 1) * seconds_per_hour, rates))
    return write_poisson(path, periods, {"chat": ((1, 1023), (1, 511)), "docs": ((4000, 8000), (1, 255))}, seed)


def generate_shift(path: str | Path, *, windows: int = 8, window_s: float = 45.0, chat_per_s: tuple = (2.0, 0.2),
                   docs_per_s: tuple = (0.1, 1.0), seed: int = 0) -> int:
    """Write a short shifting trace for the local CPU engines (``--generate-shift``): `windows` windows of
    `window_s`, the chat rate falling linearly from ``chat_per_s[0]`` to ``chat_per_s[1]`` and the documents' rate
    rising from ``docs_per_s[0]`` to ``docs_per_s[1]``; Poisson arrivals. Chat: prompt 16-112 tokens (mean 64),
    output 8-56 (mean 32); documents: prompt 512-1024 (mean 768), output 8-24 (mean 16): the classes of
    ``examples/replan/cpu_workload.yaml``, all within llama-mini's context. Returns the rows written."""
    periods = []
    for k in range(windows):
        x = k / max(windows - 1, 1)
        periods.append((k * window_s, (k + 1) * window_s,
                        {"chat": chat_per_s[0] + (chat_per_s[1] - chat_per_s[0]) * x,
                         "docs": docs_per_s[0] + (docs_per_s[1] - docs_per_s[0]) * x}))
    return write_poisson(path, periods, {"chat": ((16, 112), (8, 56)), "docs": ((512, 1024), (8, 24))}, seed)


def write_poisson(path: str | Path, periods: list, lengths: dict, seed: int) -> int:
    """Poisson arrivals of each class over each (start, end, rates by class) period, lengths uniform over the
    class's (prompt, output) ranges in `lengths`, written sorted by time (`_write_rows`); returns the rows."""
    rng = random.Random(seed)
    rows = []
    for start, end, rates in periods:
        for cls, rate in rates.items():
            t = start
            while True:
                t += rng.expovariate(rate)
                if t >= end:
                    break
                (p_lo, p_hi), (o_lo, o_hi) = lengths[cls]
                prompt = rng.randint(p_lo, p_hi)
                rows.append((t, prompt, rng.randint(o_lo, o_hi)))
    rows.sort()
    _write_rows(path, rows)
    return len(rows)


def _write_rows(path: str | Path, rows: list[tuple[float, int, int]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(AZURE_COLUMNS)
        for t, p, o in rows:
            stamp = START + timedelta(seconds=round(t, 6))
            w.writerow([stamp.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", p, o])


def class_rates(requests: list[Request], classes, window_s: float) -> list[dict[str, float]]:
    """Per window of `window_s`, each class's requests/s; a request joins the class nearest its prompt length."""
    logs = [(c.name, math.log(max(c.input_len.mean, 1.0))) for c in classes]
    n = max(int(math.ceil((requests[-1].t_s + 1e-9) / window_s)), 1)
    counts = [{c: 0 for c, _ in logs} for _ in range(n)]
    for r in requests:
        name = min(logs, key=lambda x: abs(math.log(max(r.prompt_tokens, 1)) - x[1]))[0]
        counts[min(int(r.t_s // window_s), n - 1)][name] += 1
    return [{c: k / window_s for c, k in w.items()} for w in counts]


def simulate(plan_dir: Path, requests: list[Request], window_s: float, *, replanning: bool, seed: int = 0,
             max_moves: int | None = None, forecast: str = "auto", cooldown: int | None = None,
             forecast_weight: float | None = None, windows: int | None = None, progress=print) -> list[dict]:
    """One run over the trace (the module docstring); a record per window (the first `windows` only, when given).
    `cooldown` and `forecast_weight` are ``gimletc replan --cooldown`` and ``--forecast-error-weight`` (None:
    their defaults)."""
    from compiler.compile_inputs import CompileInputs
    from compiler.driver import prepare
    from compiler.plan.checks import load_plan
    from compiler.ir.files import atomic_write_text
    from compiler.place.moves import base_key
    from compiler.deploy.metrics import parse
    from compiler.replan.replan import replan
    from compiler.replan.settings import COOLDOWN_WINDOWS, FORECAST_WEIGHT, Settings
    from compiler.replan.simulate import Deployment, SimClass
    from compiler.replan.write import REPLAN_FILE, summary_json

    inputs = CompileInputs.load(plan_dir)
    prep = prepare(inputs.model, inputs.cluster, inputs.workload, power_budget_w=inputs.power_budget_w,
                   slo_ttft_ms=inputs.slo_ttft_ms, slo_tpot_ms=inputs.slo_tpot_ms, precision=inputs.precision(),
                   cost_budget_per_hour=inputs.cost_budget_per_hour, deployable=inputs.deployable)
    w = prep.workload
    classes = [SimClass(c.name, c.input_len.mean, c.input_len.max, c.output_len.mean, c.output_len.max,
                        w.class_slo(c).ttft_ms / 1e3, w.class_slo(c).tpot_ms / 1e3, w.class_slo(c).percentile / 100)
               for c in w.classes]
    options = {base_key(o.key): o for o in prep.options}
    plan = load_plan(plan_dir)
    sim = Deployment(plan, options, classes, seed=seed)
    snaps = [parse(sim.scrape(), "scrape-0")]
    current, records = plan_dir, []
    with tempfile.TemporaryDirectory(prefix="gimletc-replay-") as scratch:
        for i, rates in enumerate(class_rates(requests, w.classes, window_s)[:windows]):
            stats = sim.step(rates, window_s)
            snaps.append(parse(sim.scrape(), f"scrape-{i + 1}"))
            record = {"window": i, "rates": {c: round(r, 4) for c, r in rates.items()},
                      "requests": round(sum(n for _c, n in stats.arrived), 3),
                      "slo_attainment": round(stats.slo_attainment, 6), "power_w": round(stats.power_w, 3),
                      "overloaded": list(stats.overloaded), "replicas": sum(p.replicas for p in sim.plan.pools),
                      "replanned": None}
            if replanning and len(snaps) >= 2:
                settings = Settings(window_s=window_s, max_moves=max_moves, forecast=forecast,
                                    cooldown_windows=COOLDOWN_WINDOWS if cooldown is None else cooldown,
                                    forecast_weight=FORECAST_WEIGHT if forecast_weight is None else forecast_weight)
                r = replan(current, inputs if current == plan_dir else CompileInputs.load(current), snaps, settings,
                           workload_dir=Path(scratch) / f"w{i}")
                record["decision"] = r.decision.reason
                record["gain"] = None if r.decision.gain is None else round(r.decision.gain, 6)
                if r.decision.act:
                    nxt = Path(scratch) / f"plan-{i}"
                    atomic_write_text(nxt / "plan.json", r.plan.dumps())
                    nxt_inputs = CompileInputs(**{**json.loads(inputs.to_json()),
                                                  "workload": str(Path(scratch) / f"w{i}" / "workload.yaml")})
                    atomic_write_text(nxt / "report" / "inputs.json", nxt_inputs.to_json())
                    atomic_write_text(nxt / "report" / REPLAN_FILE, summary_json(r))  # the cool-down's history
                    for o in r.prepared.options:  # the new shapes, as the model costs them for the measured mix
                        options.setdefault(base_key(o.key), o)
                    sim.use(r.plan)
                    snaps, current = [parse(sim.scrape(), f"scrape-{i + 1}-after")], nxt
                    record["replanned"] = (f"{r.decision.moves} move(s): "
                                           + ", ".join(f"{c.shape} {c.before}->{c.after}" for c in r.changes))
                    record["changes"] = [[c.shape, c.before, c.after] for c in r.changes]
            records.append(record)
            progress(f"{'replan' if replanning else 'static'} window {i}: "
                     + ", ".join(f"{c} {v:.2f}/s" for c, v in record["rates"].items())
                     + f"; SLO {record['slo_attainment']:.1%}, {record['power_w']:.0f} W"
                     + (f"; replanned: {record['replanned']}" if record["replanned"] else ""))
    return records


#: Windows within which a change undone counts as a flap (`reversals`): the next window or the one after, too soon
#: for the load to have moved on.
FLAP_WINDOWS = 2


def reversals(records: list[dict], within: int = FLAP_WINDOWS) -> int:
    """Flaps: shapes whose replicas a replan moved the other way from their last change, made at most `within`
    windows before (a replica added and soon removed, or removed and soon added back)."""
    last: dict[str, tuple[int, bool]] = {}  # shape -> (window, up) of its last change
    count = 0
    for r in records:
        for shape, before, after in r.get("changes") or ():
            up = after > before
            if shape in last and last[shape][1] != up and r["window"] - last[shape][0] <= within:
                count += 1
            last[shape] = (r["window"], up)
    return count


def totals(records: list[dict], window_s: float) -> dict:
    requests = sum(r["requests"] for r in records)
    met = sum(r["requests"] * r["slo_attainment"] for r in records)
    return {"requests": round(requests, 3), "requests_meeting_slo": round(met, 3),
            "slo_attainment": round(met / requests, 6) if requests else 1.0,
            "energy_kwh": round(sum(r["power_w"] for r in records) * window_s / 3.6e6, 6),
            "replans": sum(1 for r in records if r["replanned"]),
            f"reversals_within_{FLAP_WINDOWS}_windows": reversals(records),
            "windows_overloaded": sum(1 for r in records if r["overloaded"])}


def forecast_errors(requests: list[Request], classes, window_s: float) -> dict:
    from compiler.replan.forecast import errors

    series = class_rates(requests, classes, window_s)
    out = {}
    for c in classes:
        e = errors([w[c.name] for w in series])
        out[c.name] = {"points": e.points, "holt_mape": round(e.holt_mape, 6),
                       "last_value_mape": round(e.last_value_mape, 6)}
    return out


def _streamed(router: str, model: str, prompt: list[int], want: int, timeout_s: float
              ) -> tuple[float, float | None, float, int, str | None]:
    """One streamed completion of `want` tokens through `router`: (start, first token, end) on the monotonic clock,
    the tokens (from the final usage chunk, else the chunks: a chunk may carry several when the engine lags), and
    the error, if any."""
    import httpx

    body = {"model": model, "prompt": prompt, "stream": True, "max_tokens": want, "ignore_eos": True,
            "temperature": 0.0, "stream_options": {"include_usage": True}}
    start, first, n, error, usage = time.monotonic(), None, 0, None, None
    try:
        with httpx.stream("POST", f"{router}/v1/completions", json=body, timeout=timeout_s) as resp:
            if resp.status_code != 200:
                error = f"HTTP {resp.status_code}"
            else:
                for line in resp.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        chunk = json.loads(line[6:])
                        if chunk.get("choices"):
                            n += 1
                            first = first or time.monotonic()
                        if chunk.get("usage"):
                            usage = chunk["usage"].get("completion_tokens")
    except (httpx.HTTPError, ValueError) as e:
        error = type(e).__name__
    return start, first, time.monotonic(), usage if usage is not None else n, error


def _summary(results: list[dict], replans: dict[int, dict], n_windows: int, args, scrapes: Path
             ) -> tuple[list[dict], dict]:
    """The real-engine replay's record per window (printed as it is made) and its totals."""
    records = []
    for w in range(n_windows):
        rs = [x for x in results if x["window"] == w]
        sent = len(rs)
        records.append({"window": w, "sent": sent, "by_class": {c: sum(1 for x in rs if x["class"] == c)
                                                                for c in sorted({x["class"] for x in rs})},
                        "served": sum(x["served"] for x in rs), "failed": sum(not x["served"] for x in rs),
                        "met_slo": sum(x["ok"] for x in rs),
                        "slo_attainment": round(sum(x["ok"] for x in rs) / sent, 4) if sent else None,
                        "ttft_s_p50": _p50([x["ttft_s"] for x in rs]), "tpot_s_p50": _p50([x["tpot_s"] for x in rs]),
                        "replan": replans.get(w)})
        print(f"window {w}: " + json.dumps(records[-1]), flush=True)
    total = {"sent": len(results), "served": sum(x["served"] for x in results),
             "failed": sum(not x["served"] for x in results), "met_slo": sum(x["ok"] for x in results),
             "slo_attainment": round(sum(x["ok"] for x in results) / len(results), 4) if results else None,
             "replans_applied": sum(1 for r in replans.values() if r["applied"]),
             "replans_proposed": sum(1 for r in replans.values() if r["act"]),
             "replans_failed": sum(1 for r in replans.values() if r["rc"] != 0),
             "slo_ttft_s": args.slo_ttft_s, "slo_tpot_s": args.slo_tpot_s, "speed": args.speed,
             "window_s": args.window, "scrapes": str(scrapes),
             "errors": sorted({x["error"] for x in results if x["error"]})}
    return records, total


def _replan_command(plan_dir: Path, files: list[str], wall_window: float, out: Path, args) -> list[str]:
    """``gimletc replan`` of `plan_dir` on the scrape `files`, as the replay's options ask."""
    cmd = [sys.executable, "-m", "compiler.cli", "replan", str(plan_dir), *sum((["--metrics", f] for f in files), []),
           "--window", f"{wall_window:g}s", "--out", str(out)]
    cmd += ["--cluster", args.cluster] if args.cluster else []
    cmd += ["--workload", args.workload] if args.workload else []
    cmd += ["--apply"] if args.apply else []
    cmd += ["--max-moves", str(args.max_moves)] if args.max_moves is not None else []
    cmd += ["--cooldown", str(args.cooldown)] if args.cooldown is not None else []
    cmd += ["--forecast-error-weight", str(args.forecast_error_weight)] if args.forecast_error_weight is not None \
        else []
    return cmd


def _replan_record(done, out: Path, apply: bool, seconds: float) -> dict:
    """What one replan run (`done`, its output folder `out`) decided and whether it was applied."""
    summary = _read_json(out / "report" / "replan.json") or {}
    decision = summary.get("decision", {})
    acted = bool(decision.get("act"))
    return {"rc": done.returncode, "act": acted, "moves": decision.get("moves"), "reason": decision.get("reason"),
            "applied": apply and acted and done.returncode == 0, "seconds": round(seconds, 1),
            "changes": [f"{c.get('shape')} {c.get('before')}->{c.get('after')}" for c in summary.get("changes", [])],
            "error": None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]}


def _paced(requests: list[Request], speed: float, wall_window: float, n_windows: int,
           send: Callable[[int, Request], None], window_end: Callable[[int], None]) -> None:
    """Open loop: `send` each request on a thread of its own at its trace time (divided by `speed`), `window_end`
    at each window's end on the same clock, through the last window; returns when every request has ended."""
    import threading

    t0, threads, window = time.monotonic(), [], 0
    for i, r in enumerate(requests):
        due = t0 + r.t_s / speed
        while time.monotonic() < due:
            if time.monotonic() >= t0 + (window + 1) * wall_window:
                window_end(window)
                window += 1
            time.sleep(min(0.01, max(due - time.monotonic(), 0)))
        th = threading.Thread(target=send, args=(i, r), daemon=True)
        th.start()
        threads.append(th)
    while window < n_windows:  # the last windows' ends, on the clock
        time.sleep(max(t0 + (window + 1) * wall_window - time.monotonic(), 0))
        window_end(window)
        window += 1
    for th in threads:
        th.join()


def replay_engines(args, requests: list[Request]) -> int:
    """The real-engine path (module docstring): open-loop requests to the router, scrapes at each window's end,
    and with ``--apply`` (or ``--advise``) ``gimletc replan`` on the scrapes since the last change, in the
    background while the trace goes on (an apply takes minutes: engines start). A record per window: requests
    sent (by their trace arrival), served (every token streamed), failed, and meeting the replay's SLO."""
    import subprocess
    import threading

    endpoints_path = Path(args.endpoints)
    endpoints = json.loads(endpoints_path.read_text())
    model = endpoints["served_model_name"]
    scrapes = Path(args.scrapes or tempfile.mkdtemp(prefix="gimletc-scrapes-"))
    scrapes.mkdir(parents=True, exist_ok=True)
    classes = _classes(args)
    results: list[dict] = []
    lock = threading.Lock()
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(3, 500) for _ in range(min(r.prompt_tokens, args.max_prompt))] for r in requests]
    wall_window = args.window / args.speed
    n_windows = max(int(math.ceil((requests[-1].t_s + 1e-9) / args.window)), 1)

    def one(i: int, r: Request) -> None:
        want = max(min(r.output_tokens, args.max_output), 1)
        start, first, end, n, error = _streamed(endpoints["router"], model, prompts[i], want, args.request_timeout_s)
        served = error is None and n >= want
        ttft = (first - start) if first else None
        tpot = (end - first) / max(n - 1, 1) if first and n > 1 else None
        ok = served and ttft <= args.slo_ttft_s and (tpot is None or tpot <= args.slo_tpot_s)
        with lock:
            results.append({"i": i, "window": min(int(r.t_s // args.window), n_windows - 1),
                            "class": _nearest(classes, r.prompt_tokens), "served": served, "ok": ok,
                            "ttft_s": ttft, "tpot_s": tpot, "tokens": n,
                            "error": error or (None if served else f"{n} of {want} tokens")})

    current = Path(args.plan) if args.plan else None
    since = [_scrape(endpoints_path, scrapes, -1)]  # scrape files since the last change, per window
    replans: dict[int, dict] = {}
    busy = threading.Event()

    def replan_after(i: int, files: list[str], plan_dir: Path) -> None:
        nonlocal current, since
        out = scrapes.parent / f"replan-w{i:02d}"
        cmd = _replan_command(plan_dir, files, wall_window, out, args)
        t = time.monotonic()
        # in the caller's directory (the plan, scrapes and files may be relative to it), with this checkout's package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        (scrapes.parent / f"replan-w{i:02d}.txt").write_text(" ".join(cmd) + "\n\n" + done.stdout + done.stderr)
        rec = replans[i] = _replan_record(done, out, args.apply, time.monotonic() - t)
        print(f"replan after window {i}: {json.dumps(rec)}", flush=True)
        if rec["applied"]:
            current = out
            since = [_scrape(endpoints_path, scrapes, i, tag="applied")]
        busy.clear()

    def window_end(i: int) -> None:
        since.append(_scrape(endpoints_path, scrapes, i))
        if (args.apply or args.advise) and current is not None and not busy.is_set() and len(since) >= 2:
            busy.set()
            files = [f for group in since for f in group]
            threading.Thread(target=replan_after, args=(i, files, current), daemon=True).start()

    _paced(requests, args.speed, wall_window, n_windows, one, window_end)
    while busy.is_set():
        time.sleep(1)
    records, total = _summary(results, replans, n_windows, args, scrapes)
    print(json.dumps(total, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"windows": records, "totals": total, "requests": sorted(
            results, key=lambda x: x["i"])}, indent=1, sort_keys=True) + "\n")
    return 0


def _classes(args):
    from compiler.compile_inputs import CompileInputs
    from compiler.inputs import load_workload

    if args.workload:
        return load_workload(args.workload).classes
    inputs = CompileInputs.load(args.plan) if args.plan else None
    return load_workload(inputs.workload).classes if inputs else []


def _nearest(classes, prompt_tokens: int) -> str:
    if not classes:
        return "-"
    return min(classes, key=lambda c: abs(math.log(max(prompt_tokens, 1)) - math.log(max(c.input_len.mean, 1.0)))).name


def _p50(xs):
    xs = sorted(x for x in xs if x is not None)
    return round(xs[len(xs) // 2], 4) if xs else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _scrape(endpoints_path: Path, folder: Path, window: int, tag: str = "end") -> list[str]:
    """Every engine's /metrics now, one file each, all stamped with the same modification time (the metrics
    reader merges the files of one moment into one snapshot); returns ``POOL=FILE`` sources for replan. The
    endpoints are read afresh: an apply renames and replaces replicas."""
    import os
    import urllib.request

    from compiler.deploy.launch import ROUTERS

    endpoints = _read_json(endpoints_path) or {"processes": []}
    now, files = time.time(), []
    for p in endpoints["processes"]:
        if p["pool"] in ROUTERS:  # the routers' /metrics are no engine's
            continue
        try:
            with urllib.request.urlopen(f"{p['url']}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            continue
        f = folder / f"w{window + 1:04d}-{tag}-{p['pool']}-{p['replica']}.prom"
        f.write_text(text)
        os.utime(f, (now, now))
        files.append(f"{p['pool']}={f}")
    return files


def main(argv: list[str] | None = None) -> int:
    from compiler.cli.replan import duration_s

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", help="the compiled plan directory (gimletc compile --out DIR)")
    ap.add_argument("--trace", help="trace CSV: TIMESTAMP,ContextTokens,GeneratedTokens")
    ap.add_argument("--generate-day", metavar="FILE", help="write a generated shifting day to FILE and exit")
    ap.add_argument("--generate-shift", metavar="FILE", help="write a short shifting trace for the local CPU engines "
                                                             "(chat turning into documents) to FILE and exit")
    ap.add_argument("--window", type=duration_s, default=15.0, help="replan window (default 15s: an hour of the "
                                                                     "generated day)")
    ap.add_argument("--max-moves", type=int, default=None)
    ap.add_argument("--cooldown", type=int, default=None, metavar="N",
                    help="the replans' cool-down in windows (gimletc replan --cooldown; default its default; 0: off)")
    ap.add_argument("--forecast-error-weight", type=float, default=None, metavar="W",
                    help="gimletc replan --forecast-error-weight for the replans (default its default; 0: off)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--forecast", choices=("auto", "holt", "none"), default="auto",
                    help="the replans' forecast (gimletc replan --forecast; default auto)")
    ap.add_argument("--json", metavar="FILE", help="write every window's records and the totals here")
    ap.add_argument("--endpoints", help="a local deployment's endpoints.json: replay on the real engines")
    ap.add_argument("--speed", type=float, default=1.0, help="real engines: trace seconds per wall second")
    ap.add_argument("--scrapes", help="real engines: folder for the /metrics scrapes")
    ap.add_argument("--max-prompt", type=int, default=1024, help="real engines: cap on a prompt's tokens")
    ap.add_argument("--max-output", type=int, default=64, help="real engines: cap on a request's output tokens")
    ap.add_argument("--request-timeout-s", type=float, default=120.0)
    ap.add_argument("--apply", action="store_true", help="real engines: after each window run `gimletc replan "
                                                         "PLAN --apply` on the scrapes since the last change")
    ap.add_argument("--advise", action="store_true", help="real engines: the same replans without --apply (what "
                                                          "they would have moved)")
    ap.add_argument("--cluster", help="real engines: the plan's cluster file, for replan (a plan compiled with "
                                      "--no-report records none)")
    ap.add_argument("--workload", help="real engines: the plan's workload file (classes; for replan)")
    ap.add_argument("--slo-ttft-s", type=float, default=5.0)
    ap.add_argument("--slo-tpot-s", type=float, default=0.5)
    args = ap.parse_args(argv)
    if args.generate_day:
        print(f"wrote {generate_day(args.generate_day)} requests to {args.generate_day}")
        return 0
    if args.generate_shift:
        print(f"wrote {generate_shift(args.generate_shift, seed=args.seed)} requests to {args.generate_shift}")
        return 0
    if not args.trace:
        ap.error("give --trace CSV (or --generate-day FILE)")
    requests = read_trace(args.trace)
    if args.endpoints:
        return replay_engines(args, requests)
    if not args.plan:
        ap.error("give --plan DIR to simulate (or --endpoints for real engines)")
    from compiler.compile_inputs import CompileInputs
    from compiler.inputs import load_workload

    plan_dir = Path(args.plan)
    classes = load_workload(CompileInputs.load(plan_dir).workload).classes
    runs = {name: simulate(plan_dir, requests, args.window, replanning=name == "replan", seed=args.seed,
                           max_moves=args.max_moves, forecast=args.forecast, cooldown=args.cooldown,
                           forecast_weight=args.forecast_error_weight)
            for name in ("static", "replan")}
    summary = {name: totals(records, args.window) for name, records in runs.items()}
    summary["forecast"] = forecast_errors(requests, classes, args.window)
    print(json.dumps(summary, indent=1, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps({"windows": runs, "totals": summary}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
