"""Read the saved results of standard serving benchmarks as measured points (``gimletc calibrate --from``).

Before: result files a user already has. After: `MeasuredPoint` s, each one run of C clients (or an open-loop
rate) with its mean prompt and output lengths, median TTFT and TPOT, and the deployment that served it.

Formats, told apart by content (`read_points`):

- ``vllm bench serve --save-result`` JSON: one object with ``max_concurrency``, ``completed``,
  ``total_input_tokens``, ``median_ttft_ms``, ``median_tpot_ms``; ``--metadata KEY=VALUE`` pairs are
  top-level strings in it, so ``--metadata device=nvidia-h100-sxm tp=2`` states the deployment in the file;
- SGLang ``python -m sglang.bench_serving --output-file F.jsonl``: one object per line, the same kinds of keys
  (``median_itl_ms`` where an older release wrote no TPOT);
- NVIDIA AIPerf ``profile_export_aiperf.json`` (metric blocks with ``unit``, ``avg``, ``p50``; the concurrency
  and model in ``input_config``, in the layouts before and after its 2025-10 schema) and GenAI-Perf's
  ``profile_export_genai_perf.json``;
- CSV with the columns of the project's serving sweeps (``model, device, tp, concurrency, input_len,
  output_len, backend, backend_version, ttft_ms, tpot_ms``; optionally ``count, pp, dtype, kv_dtype``).

Mean lengths are the run's totals over its completed requests (the configured lengths are not what ran).

[Note: the engine's TPOT beside a result] A client times streamed chunks, and vLLM sends many tokens in one chunk
when its output path lags (two identical runs read 39 ms and 0.4 ms here); `gimletc bench` therefore measures
TPOT with the engine's own per-request histogram. A fit on the client's TPOT would then be compared with the
engine's. Where the engine's ``/metrics`` was saved before and after the run beside its result file
(``NAME.before.prom``, ``NAME.after.prom``: what ``calibrate --engine vllm`` writes, or ``curl URL/metrics`` around
your own run), the point's TPOT is the median of the engine's ``vllm:request_time_per_output_token_seconds`` over
exactly the run's requests (counts must agree), and its note says so.
An open-loop run (a request rate, no concurrency limit) is a closed loop of its mean concurrency by Little's law,
rate x mean latency, and says so in its ``note``; a run with neither limit (every request at once) is a closed
loop of all its requests.

What a file does not say about the deployment comes from `Defaults` (``calibrate --from`` flags, which also
override what a file says: a checkpoint name that is no preset, a Triton ensemble); a point
still missing a field, or a file that is none of these formats, is a `BadInput` naming the file, the field and
the fix.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterable

from compiler.ir.errors import BadInput

#: The deployment fields a point needs, and how a file or the flags state each.
DEPLOYMENT_FIELDS = ("model", "device", "count", "tp", "pp", "engine", "engine_version", "dtype", "kv_dtype")
#: Engines a point may name (the serving engines gimletc costs).
ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True, slots=True)
class Defaults:
    """What the flags say about every point whose file does not (None: the file must say it)."""

    model: str | None = None
    device: str | None = None
    count: int | None = None
    tp: int | None = None
    pp: int | None = None
    engine: str | None = None
    engine_version: str | None = None
    dtype: str | None = None
    kv_dtype: str | None = None


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    """One benchmark run: its deployment, its load, and its medians (milliseconds)."""

    source: str  # file, and line or row where a file holds several runs
    model: str
    device: str
    count: int
    tp: int
    pp: int
    engine: str
    engine_version: str | None
    dtype: str
    kv_dtype: str | None
    concurrency: int  # closed-loop clients (an open loop's: rate x mean latency, rounded)
    input_len: float  # mean prompt tokens
    output_len: float  # mean output tokens
    ttft_ms: float  # median
    tpot_ms: float  # median
    requests: int = 0
    lengths: str = "fixed"  # "vary": the run drew each request's lengths from a range
    note: str = ""

    @property
    def name(self) -> str:
        return f"{Path(self.source).name}: c{self.concurrency} i{self.input_len:.0f} o{self.output_len:.0f}"

    @property
    def e2e_ms(self) -> float:
        """A request's whole latency: TTFT and the tokens after the first."""
        return self.ttft_ms + (self.output_len - 1) * self.tpot_ms

    @property
    def deployment_key(self) -> tuple[str, str]:
        """What one fit covers: a device under an engine."""
        return self.device, self.engine

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> MeasuredPoint:
        return MeasuredPoint(**{f.name: d[f.name] for f in fields(MeasuredPoint) if f.name in d})


def read_points(paths: Iterable[str | Path], defaults: Defaults = Defaults()) -> list[MeasuredPoint]:
    """Every run in `paths`, with `defaults` filling what a file does not state; see the module docstring."""
    out: list[MeasuredPoint] = []
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text()
        except OSError as e:
            raise BadInput(f"{path}: cannot read it ({e.strerror or e}); give a benchmark result file") from None
        out += _read(path, text, defaults)
    if not out:
        raise BadInput("calibrate --from: the files hold no benchmark run")
    return out


def _read(path: Path, text: str, defaults: Defaults) -> list[MeasuredPoint]:
    stripped = text.lstrip()
    suffix = path.suffix.lower()
    if suffix == ".csv" or (suffix not in (".json", ".jsonl") and stripped and not stripped.startswith(("{", "["))):
        return _csv(path, text, defaults)
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [_one(path, path.name, whole, defaults)]
    if isinstance(whole, list):
        return [_one(path, f"{path.name}[{i}]", d, defaults) for i, d in enumerate(whole)]
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{path}:{i}: not JSON ({e}); give a vllm bench serve JSON, an SGLang bench_serving "
                           "JSONL, an AIPerf/GenAI-Perf profile export or a CSV") from None
        out.append(_one(path, f"{path.name}:{i}", d, defaults))
    return out


def _one(path: Path, where: str, d: Any, defaults: Defaults) -> MeasuredPoint:
    if not isinstance(d, dict):
        raise BadInput(f"{where}: a benchmark run is a JSON object; got {type(d).__name__}")
    if "records" in d or any(isinstance(v, dict) and "unit" in v and "avg" in v for v in d.values()):
        return _aiperf(path, where, d, defaults)
    if "median_ttft_ms" in d or "mean_ttft_ms" in d:
        return _vllm_or_sglang(path, where, d, defaults)
    raise BadInput(f"{where}: not a benchmark result gimletc reads (no median_ttft_ms, no time_to_first_token); give "
                   "a vllm bench serve --save-result JSON, an SGLang bench_serving JSONL line, an AIPerf or GenAI-Perf "
                   "profile export, or a CSV with the serving sweeps' columns")


# ---------------------------------------------------------------- vLLM and SGLang


def _number(d: dict, *keys: str) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                continue
    return None


def _vllm_or_sglang(path: Path, where: str, d: dict, defaults: Defaults) -> MeasuredPoint:
    sglang = "random_range_ratio" in d or "sharegpt_output_len" in d or d.get("backend", "").startswith("sglang")
    completed = _number(d, "completed")
    if not completed:
        raise BadInput(f"{where}: no completed requests; rerun the benchmark")
    ttft = _number(d, "median_ttft_ms", "mean_ttft_ms")
    tpot = _number(d, "median_tpot_ms", "mean_tpot_ms", "median_itl_ms", "mean_itl_ms")
    for name, value in (("median_ttft_ms", ttft), ("median_tpot_ms (or median_itl_ms)", tpot)):
        if value is None:
            raise BadInput(f"{where}: no {name}; rerun with streaming so the benchmark measures it")
    inp = _number(d, "total_input_tokens")
    out = _number(d, "total_output_tokens")
    if inp is None or out is None:
        raise BadInput(f"{where}: no total_input_tokens / total_output_tokens: the mean lengths are unknown")
    e2e = _number(d, "mean_e2e_latency_ms", "mean_e2el_ms")
    clients, note = _load(where, _number(d, "max_concurrency"), _number(d, "request_rate"), completed, e2e)
    engine_tpot = engine_quartiles(path, "request_tpot_s")
    if engine_tpot is not None and engine_tpot[3] == completed:  # [Note: the engine's TPOT beside a result]
        tpot = engine_tpot[1] * 1e3
        note = "; ".join(filter(None, (note, f"TPOT from the engine's own histogram ({path.stem}.before/after.prom)")))
    lengths = _lengths(d, sglang)
    stated = {k: d[k] for k in DEPLOYMENT_FIELDS if k in d}  # vllm bench serve --metadata
    if "model" not in stated and d.get("model_id"):
        stated["model"] = d["model_id"]
    engine = stated.get("engine") or ("sglang" if sglang else "vllm" if "model_id" in d else None)
    return _point(where, stated, defaults, engine=engine, concurrency=clients, input_len=inp / completed,
                  output_len=out / completed, ttft_ms=ttft, tpot_ms=tpot, requests=int(completed), lengths=lengths,
                  note=note)


def engine_quartiles(path: Path, quantity: str) -> tuple[float, float, float, int] | None:
    """The 25th, 50th and 75th percentile (s) and the count of `quantity`'s histogram (`compiler.deploy.metrics`
    names) between the engine's scrapes around the point of result file `path` (``NAME.before.prom``,
    ``NAME.after.prom``, written by compiler/calibrate/vllm_bench.py); None without both, or without samples."""
    from compiler.deploy.metrics import parse

    scrapes = [path.with_name(f"{path.stem}.{when}.prom") for when in ("before", "after")]
    if not all(s.exists() for s in scrapes):
        return None
    before, after = (dict(parse(s.read_text(), str(s)).histograms) for s in scrapes)
    found = [k for k in after if k[0] == quantity]
    if not found:
        return None
    h = after[found[0]].minus(before.get(found[0]))
    if h.count < 1:
        return None
    return h.quantile(0.25), h.quantile(0.5), h.quantile(0.75), int(round(h.count))


def _lengths(d: dict, sglang: bool) -> str:
    """``vary`` where the run drew its lengths from a range: per-request lengths that differ (``--save-detailed``),
    or an SGLang random range ratio below 1 (its lengths run from ratio x length to length)."""
    for key in ("input_lens", "output_lens"):
        lens = d.get(key)
        if isinstance(lens, list) and len(set(lens)) > 1:
            return "vary"
    ratio = _number(d, "random_range_ratio")
    if sglang and d.get("dataset_name") == "random" and ratio is not None and ratio < 1:
        return "vary"
    if d.get("dataset_name") not in (None, "random"):
        return "vary"  # a dataset's prompts (ShareGPT) have their own lengths
    return "fixed"


def _load(where: str, max_concurrency: float | None, rate: float | None, completed: float,
          e2e_ms: float | None) -> tuple[int, str]:
    """(closed-loop clients, note): the concurrency limit; else an open loop's mean concurrency (Little's law);
    else every request at once."""
    if max_concurrency:
        return int(max_concurrency), ""
    if rate is not None and math.isfinite(rate) and rate > 0:
        if not e2e_ms:
            raise BadInput(f"{where}: an open-loop run (request rate {rate:g}/s, no max concurrency) without its mean "
                           "end-to-end latency; rerun with --max-concurrency C (closed loop) or save the latencies")
        clients = max(1, round(rate * e2e_ms / 1e3))
        return clients, (f"open loop at {rate:g} req/s, modelled as {clients} closed-loop clients (rate x mean "
                         f"latency, Little's law)")
    return max(1, int(completed)), f"every request at once: {int(completed)} clients"


# ---------------------------------------------------------------- AIPerf and GenAI-Perf


def _metric(d: dict, *tags: str) -> dict | None:
    records = d.get("records") if isinstance(d.get("records"), dict) else {}
    for tag in tags:
        for source in (d, records):
            block = source.get(tag)
            if isinstance(block, dict) and ("avg" in block or "p50" in block):
                return block
    return None


def _ms(block: dict | None, stat: str = "p50") -> float | None:
    if block is None:
        return None
    value = block.get(stat) if block.get(stat) is not None else block.get("avg")
    if value is None:
        return None
    unit = str(block.get("unit", "ms")).lower()
    scale = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}.get(unit, 1.0)
    return float(value) * scale


def _dig(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _aiperf(path: Path, where: str, d: dict, defaults: Defaults) -> MeasuredPoint:
    ttft = _ms(_metric(d, "time_to_first_token", "ttft"))
    tpot = _ms(_metric(d, "inter_token_latency"))
    if ttft is None or tpot is None:
        raise BadInput(f"{where}: no time_to_first_token or inter_token_latency: the run was not streamed; rerun "
                       "AIPerf with --streaming")
    isl, osl = _metric(d, "input_sequence_length"), _metric(d, "output_sequence_length")
    if isl is None or osl is None:
        raise BadInput(f"{where}: no input_sequence_length / output_sequence_length block")
    config = d.get("input_config") or {}
    phases = [p for p in config.get("phases", []) if isinstance(p, dict)] if isinstance(config.get("phases"), list) \
        else []
    profiling = next((p for p in phases if p.get("name") == "profiling"), phases[-1] if phases else {})
    concurrency = (_number(profiling, "concurrency") or _number(config.get("loadgen") or {}, "concurrency")
                   or _number(config, "concurrency") or _number(_dig(config, "perf_analyzer", "stimulus") or {},
                                                                "concurrency"))
    if not concurrency:
        raise BadInput(f"{where}: the run states no concurrency (input_config); gimletc fits closed loops: rerun "
                       "with --concurrency C")
    models = (_dig(config, "endpoint", "model_names") or config.get("model_names") or config.get("model")
              or [m.get("name") for m in _dig(config, "models", "items") or [] if isinstance(m, dict)])
    stated: dict[str, Any] = {"model": models[0]} if models else {}
    count = _metric(d, "request_count")
    spread = float(isl.get("std") or 0.0) + float(osl.get("std") or 0.0)
    return _point(where, stated, defaults, engine=None, concurrency=int(concurrency),
                  input_len=float(isl.get("avg") or isl["p50"]), output_len=float(osl.get("avg") or osl["p50"]),
                  ttft_ms=ttft, tpot_ms=tpot, requests=int(count.get("avg") or 0) if count else 0,
                  lengths="vary" if spread > 0 else "fixed", note="")


# ---------------------------------------------------------------- CSV


def _csv(path: Path, text: str, defaults: Defaults) -> list[MeasuredPoint]:
    rows = list(csv.DictReader(text.splitlines()))
    need = ("concurrency", "input_len", "output_len", "ttft_ms", "tpot_ms")
    if not rows or (missing := [c for c in need if c not in rows[0]]):
        raise BadInput(f"{path}: not a benchmark CSV gimletc reads" + (f" (no column {', '.join(missing)})" if rows
                       else " (no rows)") + "; give the serving sweeps' columns: model, device, tp, concurrency, "
                       "input_len, output_len, backend, backend_version, ttft_ms, tpot_ms")
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        stated = {k: v for k, v in row.items() if k in DEPLOYMENT_FIELDS and v not in (None, "")}
        if row.get("backend"):
            stated.setdefault("engine", row["backend"])
        if row.get("backend_version"):
            stated.setdefault("engine_version", row["backend_version"])
        try:
            values = {k: float(row[k]) for k in need}
        except ValueError as e:
            raise BadInput(f"{where}: {e}; each of {', '.join(need)} is a number") from None
        out.append(_point(where, stated, defaults, engine=stated.get("engine"), concurrency=int(values["concurrency"]),
                          input_len=values["input_len"], output_len=values["output_len"], ttft_ms=values["ttft_ms"],
                          tpot_ms=values["tpot_ms"], requests=0, lengths=row.get("lengths") or "fixed", note=""))
    return out


# ---------------------------------------------------------------- the deployment of a point


def _point(where: str, stated: dict[str, Any], defaults: Defaults, *, engine: str | None, **measured: Any
           ) -> MeasuredPoint:
    """A point from its `defaults` (the flags: what the user says overrides what a file says), then what its file
    `stated`; `engine` is what the file's format implies."""
    given = {k: v for k, v in ((f.name, getattr(defaults, f.name)) for f in fields(Defaults)) if v is not None}
    values: dict[str, Any] = {**{k: v for k, v in stated.items() if v not in (None, "")}, **given}
    if "engine" not in values and engine:
        values["engine"] = engine
    for name, flag, fix in (("model", "--model PRESET", "a gimletc preset or a config.json path"),
                            ("device", "--device ID", "a device id from `gimletc backends`"),
                            ("engine", "--engine vllm|sglang|trtllm", "the engine that served the run")):
        if not values.get(name):
            raise BadInput(f"{where}: the run does not say its {name}; pass {flag} ({fix})"
                           + (f", or save it with the run (vllm bench serve --metadata {name}=...)"
                              if name != "engine" else ""))
    values["model"] = preset_of(str(values["model"]))
    engine_name = str(values["engine"]).lower().split("-")[0]
    if engine_name not in ENGINES:
        raise BadInput(f"{where}: engine {values['engine']!r} is not one gimletc costs; pass --engine "
                       f"{'|'.join(ENGINES)}")
    tp = _int(where, "tp", values.get("tp", 1))
    pp = _int(where, "pp", values.get("pp", 1))
    count = _int(where, "count", values.get("count", tp * pp))
    if measured["ttft_ms"] <= 0 or measured["tpot_ms"] <= 0 or measured["concurrency"] < 1:
        raise BadInput(f"{where}: TTFT {measured['ttft_ms']:g} ms, TPOT {measured['tpot_ms']:g} ms and concurrency "
                       f"{measured['concurrency']} must be positive")
    return MeasuredPoint(source=where, model=str(values["model"]), device=str(values["device"]), count=count, tp=tp,
                         pp=pp, engine=engine_name, engine_version=values.get("engine_version"),
                         dtype=str(values.get("dtype") or "bf16"), kv_dtype=values.get("kv_dtype"), **measured)


def _int(where: str, name: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: {name} is {value!r}; give a whole number (--{name} N)") from None
    if number < 1:
        raise BadInput(f"{where}: {name} is {number}; it must be at least 1")
    return number


#: Suffixes of a checkpoint's name that do not change its architecture.
_SUFFIXES = re.compile(r"(-instruct|-chat|-hf|-it|-base|-fp8|-fp4|-awq|-gptq|-nvfp4|-mxfp4|-dynamic)+$")


def preset_of(model: str) -> str:
    """A gimletc preset for a benchmark's model: a preset name or config path as given; a Hugging Face id
    (``meta-llama/Llama-3.1-8B-Instruct``) or a local checkpoint path the preset whose source is that checkpoint's
    base (`compiler.inputs.model_spec.preset_provenance`); else as given (the fit resolves it, or says why not).

    >>> preset_of("meta-llama/Llama-3.1-8B-Instruct"), preset_of("llama-3.1-70b"), preset_of("Qwen/Qwen3-32B")
    ('llama-3.1-8b', 'llama-3.1-70b', 'qwen3-32b')
    """
    from compiler.inputs.model_spec import preset_names, preset_provenance

    names = preset_names()
    if model in names:
        return model
    leaf = _SUFFIXES.sub("", model.rstrip("/").split("/")[-1].lower())
    for name in names:
        source = str(preset_provenance(name).get("source", ""))
        found = re.search(r"huggingface\.co/[^/]+/([^/\s]+)/", source)
        if found and _SUFFIXES.sub("", found[1].lower()) == leaf:
            return name
    return model


def with_defaults(points: list[MeasuredPoint], **changes: Any) -> list[MeasuredPoint]:
    """`points` with `changes` applied to every one (a test's or a caller's override)."""
    return [replace(p, **changes) for p in points]
