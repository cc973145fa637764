"""Serving engines as plug-ins: an engine added as one module (here a stub, registered through the
``gimletc.engines`` entry-point group as an installed package would) is launched, routed and deployed by
compile without a line elsewhere; and no module outside `backends/engines/` compares an engine's name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from backends import engines, plugins, registry
from backends.base import Backend
from backends.engines.base import LaunchInputs, RouterCommand, ServingEngine, Upstreams
from compiler.ir.engine_platform import EnginePlatform
from compiler.ir.errors import BadInput

REPO = Path(__file__).resolve().parents[2]


class Stub(ServingEngine):
    """What an out-of-tree package would ship: an engine that serves with `stubserve` and routes with
    `stubroute`."""

    name = "stubserve"
    display = "StubServe"
    release = "9.9"
    multi_node = "torch.distributed"

    def launch(self, x: LaunchInputs, connector) -> tuple[list[str], dict[str, str]]:
        return ["stubserve", x.model, "--tp", str(x.tp), "--slots", str(x.batch)], {}

    def router(self, up: Upstreams, image: str | None) -> RouterCommand:
        return RouterCommand(router="stubroute", version=self.release, image=image, command=["stubroute", *up.first],
                             policy="round_robin")

    def multi_node_commands(self, argv: list[str]) -> tuple[list[str], list[str]]:
        return argv + ["--leader"], argv + ["--follower"]


class StubCpu(Backend):
    """The host CPU's backend with the stub engine first: a pool of cpu-host on `generic` runs it."""

    family = "cpu"

    def __init__(self, real: Backend):
        self.devices, self.prices = real.devices, real.prices
        self.engines = (EnginePlatform(engine="stubserve", platform="cpu", version="9.9", image="stub:9.9",
                                       kv_buffer_device=None, source="test double"),)


class FakeEntryPoint:
    def __init__(self, name: str, load):
        self.name, self._load = name, load

    def load(self):
        return self._load()


@pytest.fixture
def stub_registered(monkeypatch):
    """The stub engine registered as a plug-in, and cpu-host devices serving with it."""
    swapped = tuple(StubCpu(b) if b.family == "cpu" else b for b in registry.backends())

    def fake(group: str | None = None, **_):
        return [FakeEntryPoint("stubserve", lambda: Stub)] if group == engines.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(plugins.metadata, "entry_points", fake)
    engines.serving_engines.cache_clear()
    monkeypatch.setattr(registry, "backends", lambda: swapped)
    yield
    engines.serving_engines.cache_clear()


def test_an_engine_added_as_one_module_is_launched_routed_and_deployed(stub_registered, tmp_path):
    """Compile, the router and the engines target take the stub's command lines as they are, replica by replica."""
    from compiler.api import compile as compile_plan

    assert engines.serving_engine("stubserve").display == "StubServe"
    cluster = tmp_path / "cluster.yaml"  # cpu_pd's fleet on the backend's default engine
    cluster.write_text((REPO / "examples/cpu_pd/cluster.yaml").read_text().replace("engine: vllm", "engine: generic"))
    plan = compile_plan("llama-mini", cluster=cluster, workload=REPO / "examples/cpu_pd/workload.yaml",
                        sensitivity=False)
    plan.save(tmp_path / "plan", report=False, onnx=False)
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    pools = [p for p in saved["pools"] if p.get("launch")]
    assert pools and {p["launch"]["engine"] for p in pools} == {"stubserve"}
    for p in pools:
        assert p["launch"]["command"] == ["stubserve", p["launch"]["model"], "--tp", str(p["tp"]), "--slots",
                                          str(p["batch"])]
    routed = [p for p in pools if p["role"] in ("colocated", "prefill")]
    assert saved["router"]["command"] == ["stubroute"] + [
        f"http://gimletc-{p['name']}-{r}.gimletc-{p['name']}:8000" for p in routed for r in range(p["replicas"])]
    k8s = "".join(f.read_text() for f in sorted((tmp_path / "plan" / "k8s").glob("*.yaml")))
    assert "- stubserve" in k8s and "- stubroute" in k8s


def test_a_backend_naming_an_unregistered_engine_is_refused(monkeypatch):
    class Orphan(Backend):
        family = "orphan"
        engines = (EnginePlatform(engine="tgi", platform="cuda", version="1", image=None, kv_buffer_device=None,
                                  source="test double"),)

    def fake(group: str | None = None, **_):
        return [FakeEntryPoint("orphan", lambda: Orphan)] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(plugins.metadata, "entry_points", fake)
    registry.backends.cache_clear()
    engines.serving_engines.cache_clear()
    try:
        with pytest.raises(BadInput, match="backend orphan lists serving engine 'tgi'"):
            registry.backends()
    finally:
        registry.backends.cache_clear()
        engines.serving_engines.cache_clear()


#: Names people compare engines by. ``external`` is a platform's name too, so it counts only against ``.engine``.
_ENGINE_NAMES = {"vllm", "sglang", "trtllm", "optimum-habana", "tensorrt-llm"}


def _literals(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _literals(e)}
    return set()


def _engine_comparisons(source: str) -> list[int]:
    """Lines of `source` that compare something with an engine's name (==, !=, in, not in)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = set().union(*(_literals(s) for s in sides))
        on_engine = any(isinstance(s, ast.Attribute) and s.attr == "engine" for s in sides)
        if names & _ENGINE_NAMES or (on_engine and "external" in names):
            out.append(node.lineno)
    return out


def test_the_scan_finds_the_comparisons_it_is_for():
    """The scan below is only as good as what it catches: each way the tree used to compare engine names."""
    caught = ['if engine == "vllm":\n    pass', 'x = launch.engine != "external"',
              'if e not in (None, "vllm"):\n    pass', 'ok = p.engine in ("vllm", "sglang")',
              'if spec[:2] != ["vllm", "serve"]:\n    pass']
    assert all(_engine_comparisons(src) for src in caught)
    assert not _engine_comparisons('if platform == "external":\n    pass')  # a platform, not an engine
    assert not _engine_comparisons('names = {"vllm": "vLLM"}')  # naming is not comparing


def test_no_module_outside_the_engine_modules_compares_an_engine_name():
    found = []
    for top in ("compiler", "cost_models", "backends"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path.is_relative_to(REPO / "backends" / "engines"):
                continue
            found += [f"{path.relative_to(REPO)}:{line}" for line in _engine_comparisons(path.read_text())]
    assert not found, "engine names compared outside backends/engines/: " + ", ".join(found)
