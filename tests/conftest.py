"""Shared fixtures: an isolated trace cache, and tiny models' BlockGraphs traced once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY_MODELS = ("llama-tiny", "mixtral-tiny", "qwen3-tiny", "qwen3-moe-tiny", "gpt-oss-tiny", "deepseek-v3-tiny")
#: The marker expression of the default run (pyproject's addopts).
DEFAULT_MARKERS = "not slow and not device and not engine"


def pytest_xdist_auto_num_workers(config) -> int:
    """pyproject's ``-n auto``: the default run on two processes (pytest-xdist, a module per process at a time,
    ``--dist loadfile``, so module fixtures are built once); a run of the `slow` or `engine` tests, or one asked
    for by ``-m``, in this process (an engine test starts real engines that want the host's cores to itself).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the count."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if config.getoption("markexpr", "") != DEFAULT_MARKERS:
        return 0
    return min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Tests never read or write the user's trace cache."""
    path = tmp_path_factory.mktemp("gimletc-cache")
    old = os.environ.get("GIMLETC_CACHE_DIR")
    os.environ["GIMLETC_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("GIMLETC_CACHE_DIR", None)
    else:
        os.environ["GIMLETC_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_graph():
    """`tiny_graph(name)`: the BlockGraph of a tiny preset, traced once per session."""
    from compiler.driver import block_graph

    memo = {}

    def get(name: str):
        if name not in memo:
            memo[name] = block_graph(name)
        return memo[name]

    return get


def preset_config(name: str) -> dict:
    return json.loads((REPO / "compiler" / "inputs" / "presets" / f"{name}.json").read_text())


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `gimletc` in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def fresh_clone(where: Path) -> tuple[Path, dict[str, str]]:
    """A clone of the committed tree at ``where/clone`` and the environment a README block runs in there, as the
    install line leaves a user: ``.venv/bin/activate`` puts gimletc on the PATH (here: this environment's, importing
    the clone's code first), which holds no gimletc before it; an empty gimletc cache beside the clone."""
    clone = where / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "activate").write_text(f'export PATH="{os.path.dirname(sys.executable)}:$PATH"\n')
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "gimletc")))
    return clone, {**os.environ, "PATH": path, "PYTHONPATH": str(clone), "GIMLETC_CACHE_DIR": str(where / "cache"),
                   "PYTHONWARNINGS": "ignore"}


def assert_one_line_error(proc, *needles: str) -> None:
    """The CLI failed with exit 2 and exactly one `gimletc: error:` line containing every needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gimletc: error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _resolved_env(container, labels):
    """A container's environment as the kubelet would resolve it (downward-API label references)."""
    out = {}
    for e in container["env"]:
        if "value" in e:
            out[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            out[e["name"]] = labels[path.removeprefix("metadata.labels['").removesuffix("']")]
    return out


def pod_processes(files: dict):
    """Every process a plan's Kubernetes manifests start, as (environment, command), expanding replicas and groups
    (StatefulSet pod index; LeaderWorkerSet group and worker index; external systems from their ConfigMap)."""
    for obj in files.values():
        kind, spec = obj["kind"], obj.get("spec", {})
        if kind == "StatefulSet":
            for ordinal in range(spec["replicas"]):
                for c in spec["template"]["spec"]["containers"]:
                    yield _resolved_env(c, {"apps.kubernetes.io/pod-index": str(ordinal)}), c["command"]
        elif kind == "LeaderWorkerSet":
            lwt = spec["leaderWorkerTemplate"]
            for group in range(spec["replicas"]):
                for worker in range(lwt["size"]):
                    labels = {"leaderworkerset.sigs.k8s.io/group-index": str(group),
                              "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}
                    for c in lwt["workerTemplate"]["spec"]["containers"]:
                        yield _resolved_env(c, labels), c["command"]
        elif kind == "Deployment":
            for _ in range(spec["replicas"]):
                for c in spec["template"]["spec"]["containers"]:
                    yield _resolved_env(c, {}), c["command"]
        elif kind == "ConfigMap" and obj["metadata"]["name"].endswith("-workers"):  # external systems
            for text in obj["data"].values():
                yield dict(line.split("=", 1) for line in text.splitlines()), ["python", "-m", "compiler.runtime.worker"]


def engine_median_ms(result_file: str, name: str) -> float:
    """The median of histogram `name` between the engine's scrapes around a point (``NAME.before.prom``,
    ``NAME.after.prom`` beside its result file), read with prometheus_client's parser and interpolated inside its
    bucket by hand, as Prometheus's ``histogram_quantile`` does."""
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    def buckets(path: Path) -> dict[float, float]:
        out: dict[float, float] = {}
        for fam in text_string_to_metric_families(path.read_text()):
            for s in fam.samples:
                if s.name == f"{name}_bucket":
                    le = float(s.labels["le"])
                    out[le] = out.get(le, 0.0) + s.value
        return out

    base = Path(result_file)
    before, after = (buckets(base.with_name(f"{base.stem}.{w}.prom")) for w in ("before", "after"))
    delta = sorted((le, c - before.get(le, 0.0)) for le, c in after.items())
    rank, lo, below = delta[-1][1] / 2, 0.0, 0.0
    for le, c in delta:
        if c >= rank and c > below:
            return (lo + (le - lo) * (rank - below) / (c - below)) * 1e3
        lo, below = le, c
    raise AssertionError(f"{result_file}: no {name} samples between the scrapes")


def histogram_text(name: str, buckets: dict[float, int], bounds: tuple[float, ...]) -> str:
    """Prometheus text of one vLLM histogram `name` whose `buckets` hold (upper bound -> samples in it), written
    with cumulative counts at each of `bounds` and +Inf, its count and its sum (each sample at its bucket's top)."""
    lines, total = [f"# TYPE {name} histogram"], 0
    for le in bounds:
        total += buckets.get(le, 0)
        lines.append(f'{name}_bucket{{le="{le}",model_name="m"}} {total}')
    lines += [f'{name}_bucket{{le="+Inf",model_name="m"}} {total}', f'{name}_count{{model_name="m"}} {total}',
              f'{name}_sum{{model_name="m"}} {sum(le * n for le, n in buckets.items())}']
    return "\n".join(lines) + "\n"
