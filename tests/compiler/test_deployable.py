"""`compile --deployable`: what the search may use stays within what public engines run, in every solve."""

from __future__ import annotations

from tests.conftest import REPO

CLUSTER = REPO / "examples" / "tiny_split" / "cluster.yaml"
WORKLOAD = REPO / "examples" / "tiny_split" / "workload.yaml"


def test_deployable_holds_in_the_placement_the_sensitivity_moves_and_the_baselines():
    from compiler.driver import fleets_of, prepare
    from compiler.sensitivity import sensitivity
    from compiler.emit.serving import engines_run
    from compiler.place.ilp import solve

    prep = prepare("llama-tiny", str(CLUSTER), str(WORKLOAD), deployable=True)
    assert prep.options and all(engines_run(o) for o in prep.options)
    assert prep.instance.kv_pairs is not None
    for _name, fleet in fleets_of(prep):
        if not isinstance(fleet, str):
            assert fleet.kv_pairs is not None and all(engines_run(o) for o in fleet.options)
    sol = solve(prep.instance, "throughput")
    for move in sensitivity(prep, sol, "throughput"):
        assert not any("decode-af" in p or "draft" in p for p in move.pools_added), move


def test_a_device_list_with_one_bad_entry_reports_that_entry_alone(tmp_path):
    import pytest

    from compiler.inputs import load_cluster
    from compiler.ir.errors import BadInput

    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndevices:\n  - {device: nvidia-h100-sxmm, count: 2}\n")
    with pytest.raises(BadInput) as e:
        load_cluster(path)
    assert "devices[0].device" in str(e.value) and "more problem" not in str(e.value)
