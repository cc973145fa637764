"""Finding backends and devices: out-of-tree plugins through entry points, and helpful errors for unknown ids."""

from __future__ import annotations

import logging

import pytest

from backends import plugins, registry
from backends.base import Backend
from compiler.ir.device_spec import DeviceSpec, MemoryTier
from compiler.ir.errors import BadInput


class DummyBackend(Backend):
    """What an out-of-tree vendor package exposes under the ``gimletc.backends`` entry-point group."""

    family = "dummy"
    devices = (
        DeviceSpec(
            id="dummy-npu", vendor="Dummy", product="Dummy NPU", family="dummy", form="chip",
            peak_flops_per_s=(("bf16", 1e15),), memory=(MemoryTier("hbm", 64e9, 2e12),),
            tdp_w=500, idle_w=50, devices_per_node=4, scale_up=None, scale_out=None,
            k8s_resource="example.com/npu",
            sources=tuple(sorted((key, "assumption: test double") for key in (
                "peak_flops_per_s.bf16", "memory.hbm.capacity_bytes", "memory.hbm.bw_bytes_per_s", "tdp_w",
                "idle_w", "devices_per_node"))),
        ),
    )


class FakeEntryPoint:
    """Stands in for `importlib.metadata.EntryPoint`: a name and a `load()`."""

    def __init__(self, name: str, load):
        self.name = name
        self._load = load

    def load(self):
        return self._load()


def _broken():
    raise ImportError("No module named 'gimletc_broken_vendor'")


@pytest.fixture
def entry_points(monkeypatch):
    """`entry_points(*eps)` makes the registry see exactly these plugins; the cache is cleared around it."""

    def install(*eps: FakeEntryPoint) -> None:
        def fake(group: str | None = None, **_):
            return list(eps) if group == registry.ENTRY_POINT_GROUP else []

        monkeypatch.setattr(plugins.metadata, "entry_points", fake)
        registry.backends.cache_clear()

    yield install
    registry.backends.cache_clear()


def test_plugin_backend_joins_the_catalog(entry_points):
    entry_points(FakeEntryPoint("dummy", lambda: DummyBackend))
    ids = [d.id for d in registry.all_devices()]
    assert "dummy-npu" in ids and "nvidia-h100-sxm" in ids
    npu = registry.device("dummy-npu")
    assert isinstance(registry.backend_of(npu), DummyBackend)
    assert registry.backend_of(npu).execution(npu) == "emulated"


def test_broken_plugin_is_skipped_with_a_warning(entry_points, caplog):
    entry_points(FakeEntryPoint("broken", _broken), FakeEntryPoint("dummy", lambda: DummyBackend))
    with caplog.at_level(logging.WARNING, logger="backends.registry"):
        ids = [d.id for d in registry.all_devices()]
    assert "dummy-npu" in ids
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("broken" in w and "gimletc_broken_vendor" in w for w in warnings), warnings


def test_plugin_reusing_a_builtin_family_is_rejected(entry_points):
    class Impostor(Backend):
        family = "nvidia"

    entry_points(FakeEntryPoint("impostor", lambda: Impostor))
    with pytest.raises(BadInput, match="nvidia"):
        registry.all_devices()


def test_unknown_device_id_suggests_close_matches_and_lists_known_ids():
    with pytest.raises(BadInput) as excinfo:
        registry.device("nvidia-h100")
    message = str(excinfo.value)
    assert "'nvidia-h100'" in message
    assert "did you mean" in message and "nvidia-h100-sxm" in message
    assert "known ids" in message and "amd-mi300x" in message and "cerebras-cs3" in message
