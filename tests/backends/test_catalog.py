"""The built-in device catalog: the contracted ids, a source for every number, deployment facts and spot checks.

Expected values are typed from ../shared/reference/hardware_facts.yaml, never read back from the backends.
"""

from __future__ import annotations

import math

import pytest

from backends import registry
from compiler.ir.device_spec import DeviceSpec

#: Product contracts: these ids are what users pass to --device (cpu-host is added by backends/cpu.py).
CONTRACT_IDS = {
    "nvidia": ("nvidia-a100-sxm-40gb", "nvidia-a100-sxm-80gb", "nvidia-l40s", "nvidia-h100-sxm", "nvidia-h200-sxm",
               "nvidia-b200", "nvidia-gb200"),
    "amd": ("amd-mi300x", "amd-mi325x", "amd-mi355x"),
    "trainium": ("aws-trn1", "aws-trn2", "aws-inf2"),
    "cerebras": ("cerebras-cs3",),
    "dmatrix": ("dmatrix-corsair",),
    "gaudi": ("intel-gaudi2", "intel-gaudi3"),
}
#: Kubernetes extended resources per family (hardware_facts.md note 9).
K8S_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "trainium": "aws.amazon.com/neuron",
                 "gaudi": "habana.ai/gaudi"}
NO_DEVICE_PLUGIN = ("cerebras-cs3", "dmatrix-corsair")
DTYPE_KEYS = {"bf16", "fp16", "fp8", "fp4", "int8", "fp32"}
SOURCE_LABELS = ("http://", "https://", "assumption:", "measured:")


def catalog() -> dict[str, DeviceSpec]:
    return {d.id: d for d in registry.all_devices()}


def contracted() -> list[DeviceSpec]:
    devices = catalog()
    return [devices[i] for ids in CONTRACT_IDS.values() for i in ids]


def test_every_contracted_id_exists_once_in_its_family():
    ids = [d.id for d in registry.all_devices()]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    devices = catalog()
    missing = [i for family_ids in CONTRACT_IDS.values() for i in family_ids if i not in devices]
    assert not missing, f"missing device ids: {missing}"
    wrong = [(i, devices[i].family) for family, family_ids in CONTRACT_IDS.items() for i in family_ids
             if devices[i].family != family]
    assert not wrong, wrong


def test_every_number_has_a_url_or_a_labelled_source():
    unsourced = []
    for d in registry.all_devices():
        for key in d.claims():
            source = d.source(key) or ""
            label = next((p for p in SOURCE_LABELS if source.startswith(p)), None)
            if label is None or not source[len(label):].strip():  # a bare "assumption:" says nothing
                unsourced.append(f"{d.id}: {key} -> {source!r}")
    assert not unsourced, "numbers without a URL or 'assumption:'/'measured:' source:\n" + "\n".join(unsourced)


def test_no_source_names_a_number_the_device_does_not_have():
    """A source key that matches no number is a typo that leaves the real number unsourced."""
    stray = [f"{d.id}: {key}" for d in registry.all_devices() for key, _ in d.sources if key not in d.claims()]
    assert not stray, stray


def test_numbers_are_well_formed():
    for d in contracted():
        assert d.form in ("chip", "card", "system"), d.id
        assert set(d.dtypes) <= DTYPE_KEYS, (d.id, d.dtypes)
        assert all(math.isfinite(v) and v > 0 for v in d.numbers().values()), d.id
        bandwidths = [t.bw_bytes_per_s for t in d.memory]
        assert bandwidths == sorted(bandwidths, reverse=True), f"{d.id}: memory tiers must be fastest first"
        assert 0 < d.idle_w < d.tdp_w, d.id
        for link in (d.scale_up, d.scale_out):
            assert link is None or link.domain_devices >= 1, d.id


def test_kubernetes_resources():
    devices = catalog()
    for device_id in NO_DEVICE_PLUGIN:
        assert devices[device_id].k8s_resource is None, device_id
        assert devices[device_id].k8s_note.strip(), f"{device_id} must say why it has no Kubernetes resource"
    for family, resource in K8S_RESOURCES.items():
        for device_id in CONTRACT_IDS[family]:
            assert devices[device_id].k8s_resource == resource, device_id


@pytest.mark.parametrize("device_id, key, expected", [
    ("nvidia-h100-sxm", "peak_flops_per_s.bf16", 989e12),          # dense: nvidia.com's 1,979 is 2:4-sparse
    ("nvidia-h100-sxm", "memory.hbm.bw_bytes_per_s", 3.35e12),
    ("nvidia-b200", "peak_flops_per_s.fp4", 9000e12),
    ("amd-mi300x", "memory.hbm.capacity_bytes", 192e9),
    ("intel-gaudi3", "peak_flops_per_s.bf16", 1677e12),            # shipped 1,600 MHz clock, not the paper's 1,835
    ("aws-trn2", "memory.hbm.capacity_bytes", 96 * 2**30),          # Neuron docs say GiB
    ("aws-trn2", "peak_flops_per_s.fp8", 1299e12),                  # dense; 2,563 is 4:1 sparse
    ("cerebras-cs3", "memory.sram.capacity_bytes", 44e9),
    ("cerebras-cs3", "memory.sram.bw_bytes_per_s", 21e15),
    ("dmatrix-corsair", "memory.sram.bw_bytes_per_s", 150e12),
    ("dmatrix-corsair", "memory.dram.capacity_bytes", 256e9),
    ("dmatrix-corsair", "peak_flops_per_s.int8", 2400e12),
])
def test_spot_checks_against_hardware_facts(device_id, key, expected):
    assert registry.device(device_id).numbers()[key] == pytest.approx(expected, rel=1e-9)


def test_weights_go_to_sram_first_on_wafer_and_dimc_parts():
    assert [t.name for t in registry.device("cerebras-cs3").memory][0] == "sram"
    assert [t.name for t in registry.device("dmatrix-corsair").memory] == ["sram", "dram"]
    for d in contracted():
        if d.family not in ("cerebras", "dmatrix"):
            assert [t.name for t in d.memory] in (["hbm"], ["dram"]), f"{d.id}: no cache tiers on GPUs/Gaudi"


def test_gb200_scale_up_spans_the_nvl72_rack():
    gb200 = registry.device("nvidia-gb200")
    assert gb200.devices_per_node == 4 and gb200.scale_up.domain_devices == 72


def test_unpublished_dtypes_are_reported_unsupported():
    corsair = registry.device("dmatrix-corsair")
    reasons = registry.backend_of(corsair).unsupported_reasons(corsair, "bf16")
    assert reasons and "bf16" in reasons[0]
    assert registry.backend_of(corsair).unsupported_reasons(corsair, "fp8") == []


def test_every_device_round_trips_through_json():
    for d in registry.all_devices():
        assert DeviceSpec.from_json(d.to_json()) == d, d.id


def test_devices_without_a_torch_device_run_emulated():
    for family in ("trainium", "cerebras", "dmatrix"):
        for device_id in CONTRACT_IDS[family]:
            d = registry.device(device_id)
            assert d.torch_device is None and registry.backend_of(d).execution(d) == "emulated", device_id


def test_cuda_and_rocm_builds_of_torch_are_told_apart(monkeypatch):
    """Both builds answer ``torch.cuda``; only the matching vendor's devices run natively."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    h100, mi300x = registry.device("nvidia-h100-sxm"), registry.device("amd-mi300x")

    monkeypatch.setattr(torch.version, "hip", None)
    assert registry.backend_of(h100).execution(h100) == "native"
    assert registry.backend_of(mi300x).execution(mi300x) == "emulated"

    monkeypatch.setattr(torch.version, "hip", "6.3.42131")
    assert registry.backend_of(h100).execution(h100) == "emulated"
    assert registry.backend_of(mi300x).execution(mi300x) == "native"
