"""What `gimletc deploy --local` refuses before any set-up, and why it says so (`compiler.deploy.local.check_local`)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

MIXED_PLAN = REPO / "tests" / "emit" / "orchestrator_golden" / "plan-mixed.json"


def test_a_plan_for_gpus_is_refused_for_its_devices_not_for_deployable():
    """A plan for GPUs that also needs the reference runtime was told to recompile with --deployable,
    which would not make it run here either: its pools are not this host's CPUs."""
    from compiler.deploy.local import check_local
    from compiler.plan.checks import load_plan
    from compiler.ir.errors import BadInput

    plan = load_plan(MIXED_PLAN)
    assert plan.needs_runtime  # the case of the issue: both reasons hold, the devices are the one to say
    with pytest.raises(BadInput) as e:
        check_local(plan, MIXED_PLAN.parent)
    message = str(e.value)
    assert "this host's CPUs" in message and "cpu-host" in message and "--deployable" not in message
    for pool in plan.pools:
        assert f"{pool.name} ({pool.device}, {pool.launch.platform})" in message
