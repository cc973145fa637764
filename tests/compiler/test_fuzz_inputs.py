"""Fuzzing every file a user hands gimletc: cluster, workload, scenario (CSV) and plan files.

Hypothesis mutates valid files (fields dropped, wrong types, negative and huge
numbers, infinities, unknown device ids, unicode, unknown fields, broken
syntax, stray bytes) and writes raw text too. The loaders run in-process. Every
case must end in success or in one `BadInput` line that names the file (and,
for a bad value, the field); anything else (a traceback) fails the test. Loaded
files are then used the way the compiler uses them, so "success" means usable.
At least `CASES` cases run per file kind; derandomized, so the default run is
reproducible.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.emit.k8s import manifests
from compiler.plan.checks import load_plan
from compiler.plan.topology import world_size
from compiler.inputs import load_cluster, load_workload
from compiler.inputs.scenarios import read_rows, scenario
from compiler.ir.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
CASES = 500
SETTINGS = settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
WORK = Path(tempfile.mkdtemp(prefix="gimletc-fuzz-"))

# ------------------------------------------------------------------------------------------ strategies

JUNK_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
UNICODE = st.sampled_from(["ñvidia-h100-sxm", "Ｈ100", "h100\u200b", "🚀", "名前", "\u202eevil", "nvidia-h100-sxm\n"])
NUMBERS = st.one_of(st.integers(-10**6, 0), st.sampled_from([10**16, 10**30, 10**400, -10**400, 1e308, -1e308]),
                    st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e-300, 0.0, -0.0]),
                    st.floats(allow_nan=True, allow_infinity=True))
DEVICE_IDS = st.sampled_from(["nvidia-h100", "nvidia-h100-sxm ", "NVIDIA-H100-SXM", "amd-mi300", "tpu-v5", "",
                              "cpu-host", "cerebras-cs3"])
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, JUNK_TEXT, UNICODE, DEVICE_IDS)
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(JUNK_TEXT, inner, max_size=3)), max_leaves=6)


def _paths(doc, prefix=()):
    """Every (path) to a value inside `doc`, the root included."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _delete(doc, path):
    if path:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
    return doc


@st.composite
def mutated(draw, bases):
    """A valid document with one to three mutations at random places."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))[1:] or [()]  # the whole document replaced is what RAW covers
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "scale"]))
        if action == "delete" and path:
            doc = _delete(doc, path)
        elif action == "add":
            target = draw(st.sampled_from([p for p in paths if isinstance(_get(doc, p), dict)] or [()]))
            container = _get(doc, target)
            if isinstance(container, dict):
                container[draw(st.one_of(JUNK_TEXT, UNICODE))] = draw(JSONISH)
        elif action == "scale" and isinstance(_get(doc, path), (int, float)) and not isinstance(_get(doc, path), bool):
            doc = _set(doc, path, _get(doc, path) * draw(st.sampled_from([-1, 0, 10**20])))
        else:
            doc = _set(doc, path, draw(JSONISH))
    return doc


@st.composite
def nudged(draw, bases):
    """A valid document with its numbers moved to edges (0, 1, negative, huge, fractional): often still valid."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    numbers = [p for p in _paths(doc) if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]
    for path in draw(st.lists(st.sampled_from(numbers), min_size=1, max_size=4)) if numbers else []:
        doc = _set(doc, path, draw(st.sampled_from([0, 1, 2, 3, 7, -1, 0.5, 1e-9, 10**6, 10**9, 10**15, 10**16,
                                                    2**63, 1e15, 1e16])))
    return doc


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _yaml_text(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


RAW = st.one_of(st.binary(max_size=64), JUNK_TEXT.map(str.encode),
                st.sampled_from([b"", b"---\n", b"- a\n- b\n", b"key: [unclosed\n", b"\t: x", b"\xff\xfe\x00",
                                 b"a: &x [*x]\n", b"name: x\nname: y\n", b"!!python/object:os.system ls\n"]))



# ------------------------------------------------------------------------------------------ checking


def _outcome(load, path: Path, *, prefix: str):
    """Run `load(path)`: a value, or a `BadInput` whose one line starts with `prefix` (naming the file)."""
    try:
        return load(path)
    except BadInput as e:
        message = str(e)
        assert "\n" not in message and message.startswith(prefix), message
        assert "Traceback" not in message
        return None


def _run(strategy, check) -> int:
    """Run `check` on `CASES` examples of `strategy`; returns how many ran."""
    seen = []

    @SETTINGS
    @given(strategy)
    def case(data):
        seen.append(1)
        check(data)

    case()
    return len(seen)


def _write(name: str, data: bytes) -> Path:
    path = WORK / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------- clusters

CLUSTER_BASES = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / "clusters").glob("*.yaml"))]
CLUSTER_BASES.append(yaml.safe_load((REPO / "tests" / "emit" / "k8s_golden" / "cluster.yaml").read_text()))


def _use_cluster(cluster) -> None:
    ids = list(cluster.inventory())
    cluster.power_budget_w
    for a in ids:
        cluster.node_size(a)
        cluster.entry(a)
        for b in ids:
            cluster.link(a, b)


def test_fuzz_cluster_files():
    def check(data):
        path = _write("cluster.yaml", data if isinstance(data, bytes) else _yaml_text(data).encode())
        cluster = _outcome(load_cluster, path, prefix=f"{path}: ")
        if cluster is not None:
            _use_cluster(cluster)

    assert _run(st.one_of(mutated(CLUSTER_BASES), nudged(CLUSTER_BASES), RAW), check) >= CASES


# ------------------------------------------------------------------------------------------ workloads

WORKLOAD_BASES = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / "workloads").glob("*.yaml"))]


def _use_workload(w) -> None:
    for attr in ("mean_input_len", "mean_output_len", "max_input_len", "max_output_len", "mean_prefill_tokens",
                 "kv_tokens_per_request_mean", "kv_tokens_per_request_max"):
        value = getattr(w, attr)
        assert value == value and abs(value) < float("inf"), (attr, value)  # finite, not nan
    assert abs(sum(c.share for c in w.classes) - 1) < 1e-9


def test_fuzz_workload_files():
    def check(data):
        path = _write("workload.yaml", data if isinstance(data, bytes) else _yaml_text(data).encode())
        workload = _outcome(load_workload, path, prefix=f"{path}: ")
        if workload is not None:
            _use_workload(workload)

    assert _run(st.one_of(mutated(WORKLOAD_BASES), nudged(WORKLOAD_BASES), RAW), check) >= CASES


def test_an_integer_too_large_for_a_float_is_one_line_bad_input():
    """Found by the fuzzer: a 401-digit input_len crashed the range check's message (OverflowError)."""
    path = _write("huge.yaml", (b"name: chat\nclasses:\n  - {name: chat, share: 1, input_len: 1" + b"0" * 400
                                + b", output_len: 256}\nslo: {ttft_ms: 1000, tpot_ms: 50}\n"))
    with pytest.raises(BadInput, match="401-digit number is larger than any real fleet") as e:
        load_workload(path)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{path}: ")


# ------------------------------------------------------------------------------------------ scenarios

SCENARIO_ROWS = [
    {"id": "a", "model": "llama-3.1-8b", "device": "nvidia-h100-sxm", "count": "1", "tp": "1", "pp": "1",
     "dtype": "bf16", "input_len": "1024", "output_len": "256", "batch": "8"},
    {"id": "b", "model": "llama-3.1-70b", "device": "amd-mi300x", "count": "8", "tp": "8", "pp": "1",
     "dtype": "fp8", "input_len": "4096", "output_len": "512", "batch": "max"},
]
CELLS = st.one_of(JUNK_TEXT, UNICODE, DEVICE_IDS, NUMBERS.map(str), st.sampled_from(["", " ", "max", "MAX", "1.5",
                                                                                        "0", "-1", "1e3", '"', ",",
                                                                                        "fp8", "int4", "\x00"]))
HEADERS = st.sampled_from(["model", "device", "count", "tp", "pp", "dtype", "kv_dtype", "input_len", "output_len",
                           "batch", "concurrency", "id", "concurency", "Model", "input-len", "", "devices", "🚀"])


@st.composite
def scenario_files(draw) -> bytes:
    rows = copy.deepcopy(SCENARIO_ROWS)
    header = list(rows[0])
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["cell", "cell", "rename", "drop", "extra", "short", "raw"]))
        if action == "cell":
            rows[draw(st.integers(0, 1))][draw(st.sampled_from(header))] = draw(CELLS)
        elif action == "rename":
            i = draw(st.integers(0, len(header) - 1))
            header[i] = draw(HEADERS)
        elif action == "drop" and len(header) > 1:
            header.pop(draw(st.integers(0, len(header) - 1)))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        cells = [str(row.get(h, "")) for h in header]
        if action == "extra":
            cells.append(draw(CELLS))
        elif action == "short":
            cells = cells[:draw(st.integers(0, len(cells)))]
        writer.writerow(cells)
    data = out.getvalue().encode()
    if action == "raw":
        data = data[:draw(st.integers(0, len(data)))] + draw(st.binary(max_size=8))
    return data


def test_fuzz_scenario_files():
    def check(data):
        path = _write("scenarios.csv", data)
        rows = _outcome(read_rows, path, prefix=f"--scenarios {path}: ")
        for row in rows or []:
            try:
                kwargs = scenario(row)
            except BadInput as e:  # one bad row: reported in its error column, naming the column
                assert "\n" not in str(e) and ("column" in str(e) or "batch" in str(e) or "value" in str(e)), str(e)
                continue
            assert kwargs["count"] >= 1 and kwargs["pp"] >= 1 and kwargs["input_len"] >= 1

    assert _run(st.one_of(scenario_files(), RAW), check) >= CASES


# ------------------------------------------------------------------------------------------- traces

TRACE_ROWS = [
    {"TIMESTAMP": "2023-11-16 18:15:46.6805900", "ContextTokens": "374", "GeneratedTokens": "44"},
    {"TIMESTAMP": "2023-11-16 18:15:50.9951690", "ContextTokens": "396", "GeneratedTokens": "109"},
    {"TIMESTAMP": "2023-11-16 18:15:51.2015330", "ContextTokens": "879", "GeneratedTokens": "6"},
    {"TIMESTAMP": "2023-11-16 18:15:51.5203300", "ContextTokens": "91", "GeneratedTokens": "47"},
]
TRACE_HEADERS = st.sampled_from(["TIMESTAMP", "ContextTokens", "GeneratedTokens", "input_tokens", "output_tokens",
                                 "timestamp", "arrival_time", "prompt_tokens", "completion_tokens", "input_len", "",
                                 "contexttokens", "🚀"])
TRACE_CELLS = st.one_of(CELLS, st.sampled_from(["1e400", "-1e400", "inf", "-inf", "nan", "2023-13-45", "9999-12-31",
                                                "0001-01-01T00:00:00", "1e308", "10**9", "3.7", "+5", " 7 ", "1e-300",
                                                "0", "2023-11-16 18:15:46.6805900"]))


@st.composite
def trace_files(draw) -> tuple[str, bytes, int]:
    """(suffix, bytes, classes) of a trace: the Azure-style CSV or a JSONL, mutated."""
    rows = copy.deepcopy(TRACE_ROWS)[:draw(st.integers(1, len(TRACE_ROWS)))]
    header = list(rows[0])
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["cell", "cell", "rename", "drop", "raw", "value"]))
        if action in ("cell", "value"):
            row = rows[draw(st.integers(0, len(rows) - 1))]
            row[draw(st.sampled_from(header))] = draw(TRACE_CELLS) if action == "cell" else draw(JSONISH)
        elif action == "rename":
            header[draw(st.integers(0, len(header) - 1))] = draw(TRACE_HEADERS)
        elif action == "drop" and len(header) > 1:
            header.pop(draw(st.integers(0, len(header) - 1)))
    if draw(st.booleans()):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows([[str(r.get(h, "")) for h in header] for r in rows])
        suffix, data = ".csv", out.getvalue().encode()
    else:
        suffix, data = ".jsonl", b"".join(_json_bytes({h: r.get(h) for h in header}) + b"\n" for r in rows)
    if action == "raw":
        data = data[:draw(st.integers(0, len(data)))] + draw(st.binary(max_size=8))
    return suffix, data, draw(st.sampled_from([1, 2, 4, 16]))


def test_fuzz_trace_files():
    """A workload naming a request trace (`compiler.inputs.trace`): every mutated trace loads into usable classes
    or fails with one line naming the trace (or the workload) file."""
    def check(case):
        suffix, data, classes = case
        trace = _write(f"trace{suffix}", data)
        workload = _write("traced.yaml", _yaml_text({"name": "traced", "trace": {"path": trace.name, "classes": classes},
                                                     "slo": {"ttft_ms": 1000, "tpot_ms": 50}}).encode())
        try:
            w = load_workload(workload)
        except BadInput as e:
            message = str(e)
            assert "\n" not in message and message.startswith((f"trace {trace}: ", f"{workload}: ")), message
            return
        _use_workload(w)
        assert 1 <= len(w.classes) <= classes

    assert _run(st.one_of(trace_files(), st.tuples(st.sampled_from([".csv", ".jsonl"]), RAW, st.just(4))),
                check) >= CASES


# ---------------------------------------------------------------------------------------------- plans

PLAN_BASES = [json.loads((REPO / "tests" / "emit" / "k8s_golden" / "plan.json").read_text())]


def _json_bytes(doc) -> bytes:
    try:
        return json.dumps(doc, ensure_ascii=False).encode()
    except ValueError:  # e.g. an integer too long for str(); write it some other way
        return json.dumps(str(doc)).encode()


def test_fuzz_plan_files():
    """A tampered plan is rejected by `load_plan` (schema and meaning); an accepted one deploys."""
    def check(data):
        path = _write("plan.json", data if isinstance(data, bytes) else _json_bytes(data))
        plan = _outcome(load_plan, path, prefix=f"plan {path}: ")
        if plan is not None:
            assert world_size(plan) >= 1
            try:
                manifests(plan)
            except BadInput as e:
                assert str(e).startswith(("plan:", "plan ")), str(e)

    assert _run(st.one_of(mutated(PLAN_BASES), nudged(PLAN_BASES), RAW), check) >= CASES


@pytest.mark.parametrize("field,value,needle", [
    ("schema_version", 2, "schema_version 2"),
    ("pools", "not a list", "field pools:"),
])
def test_schema_violations_name_the_field(field, value, needle):
    doc = copy.deepcopy(PLAN_BASES[0])
    doc[field] = value
    path = _write("plan.json", json.dumps(doc).encode())
    with pytest.raises(BadInput, match=needle):
        load_plan(path)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["pools"][0].update(tp=0), "pools[0].tp: 0 is out of range"),
    (lambda d: d["pools"][1].update(device="nvidia-h100"), "pools[1].device: device 'nvidia-h100' is not known"),
    (lambda d: d["pools"][1].update(name="pool0"), "pools[1].name: 'pool0' names two pools"),
    (lambda d: d["transfers"][0].update(dst_pool="pool9"), "transfers[0].dst_pool: no pool is named 'pool9'"),
    (lambda d: d["pools"][0]["stages"].pop(), "pools[0].stages: 1 stages but pp is 2"),
])
def test_tampered_plans_are_rejected_before_anything_runs(edit, needle):
    doc = copy.deepcopy(PLAN_BASES[0])
    edit(doc)
    path = _write("plan.json", json.dumps(doc).encode())
    with pytest.raises(BadInput) as info:
        load_plan(path)
    assert str(info.value).startswith(f"plan {path}: field ") and needle in str(info.value)
