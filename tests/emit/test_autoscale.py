"""Autoscaler rules between replans (`compiler.emit.k8s.autoscale`): KEDA ScaledObjects validate strictly against
KEDA's vendored CRD, every pool at its maximum at once keeps the power budget and the inventory (checked on random
plans, not by the formula), and the Dynamo planner's configuration uses PlannerConfig's own fields."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from compiler.emit.k8s.autoscale import dynamo_planner, replica_ranges, scaled_objects, waiting_threshold
from compiler.plan.checks import load_plan
from compiler.inputs import load_cluster
from tests.emit.crd_schema import strict

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "orchestrator_golden"
#: The fields of dynamo.planner.config.planner_config.PlannerConfig and their literal choices, read from
#: github.com/ai-dynamo/dynamo components/src/dynamo/planner/config/planner_config.py at commit 34ede16d.
PLANNER_FIELDS = {
    "pre_deployment_sweeping_mode": ("none", "rapid", "thorough"), "environment": ("kubernetes", "virtual",
    "global-planner"), "backend": ("vllm", "sglang", "trtllm", "mocker"), "mode": ("disagg", "prefill", "decode",
    "agg"), "optimization_target": ("throughput", "latency", "sla"), "no_operation": None, "log_dir": None,
    "throughput_adjustment_interval": None, "max_gpu_budget": None, "min_endpoint": None,
    "decode_engine_num_gpu": None, "prefill_engine_num_gpu": None, "profile_results_dir": None, "ttft": None,
    "itl": None, "load_predictor": ("constant", "arima", "kalman", "prophet"), "load_predictor_log1p": None,
    "prophet_window_size": None, "load_predictor_warmup_trace": None, "kalman_q_level": None,
    "kalman_q_trend": None, "kalman_r": None, "kalman_min_points": None, "metric_reporting_prometheus_port": None,
    "throughput_metrics_source": ("frontend", "router"), "model_name": None, "global_planner_namespace": None,
    "enable_throughput_scaling": None, "enable_load_scaling": None, "load_adjustment_interval": None,
}


def _watts(plan) -> dict[str, float]:
    """One replica's provisioned watts per pool: the plan's total split by devices (they sum to the plan's)."""
    devices = sum(p.replicas * p.devices_per_replica for p in plan.pools)
    return {p.name: plan.predicted.provisioned_power_w * p.devices_per_replica / devices for p in plan.pools}


@pytest.fixture(scope="module")
def nvidia():
    return load_plan(GOLDEN / "plan-nvidia.json"), load_cluster(GOLDEN / "cluster-nvidia.yaml")


def test_scaled_objects_validate_against_kedas_crd(nvidia):
    import jsonschema

    crd = json.loads((HERE / "crds" / "scaledobject.json").read_text())
    validator = jsonschema.Draft7Validator(strict(crd["openAPIV3Schema"]))
    plan, cluster = nvidia
    rates = {p.name: 10.0 for p in plan.pools}
    objects, ranges = scaled_objects(plan, cluster, _watts(plan), rates)
    kustomization = objects.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(objects) and len(objects) == len(plan.pools)
    for name, obj in objects.items():
        errors = sorted(validator.iter_errors(obj), key=str)
        assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        assert obj["apiVersion"] == f"{crd['group']}/{crd['version']}"
    bad = json.loads(json.dumps(next(iter(objects.values()))))
    bad["spec"]["maxReplicas"] = bad["spec"].pop("maxReplicaCount")  # HPA's spelling: KEDA would prune it
    assert not validator.is_valid(bad)
    assert [r.pool for r in ranges] == [p.name for p in plan.pools]


def test_every_pool_at_its_maximum_keeps_the_budget_and_inventory():
    """Random plans within their budget and inventory: all pools at their maxima at once (the worst the independent
    autoscalers can do) stay within both; a pool's maximum is never below the plan's replicas; and a plan with
    room for a whole replica more than every pool's share gets it (the bound is not vacuous)."""
    rng = random.Random(7)
    grew = 0
    for _ in range(300):
        types = {f"t{i}": rng.randint(4, 64) for i in range(rng.randint(1, 3))}
        pools, used = [], {t: 0 for t in types}
        for i in range(rng.randint(1, 5)):
            t = rng.choice(sorted(types))
            d = rng.choice((1, 2, 4))
            n = rng.randint(1, 4)
            if used[t] + n * d > types[t]:
                continue
            used[t] += n * d
            pools.append(SimpleNamespace(name=f"pool{i}", device=t, devices_per_replica=d, replicas=n))
        if not pools:
            continue
        watts = {p.name: rng.uniform(200, 3000) * p.devices_per_replica for p in pools}
        drawn = sum(p.replicas * watts[p.name] for p in pools)
        budget = rng.choice((None, drawn * rng.uniform(1.0, 3.0)))
        plan = SimpleNamespace(power_budget_w=budget, inventory=types, pools=pools)
        ranges = replica_ranges(plan, watts)
        top = {p.name: ranges[p.name][1] for p in pools}
        if budget is not None:
            assert sum(top[p.name] * watts[p.name] for p in pools) <= budget * (1 + 1e-9)
        for t, count in types.items():
            assert sum(top[p.name] * p.devices_per_replica for p in pools if p.device == t) <= count
        assert all(ranges[p.name][0] == 1 and top[p.name] >= p.replicas for p in pools)
        grew += sum(top[p.name] > p.replicas for p in pools)
    assert grew > 100


def test_the_queue_threshold_drains_within_the_ttft_slack():
    """A queue of `threshold` requests at one replica, served one by one at mu requests/s (a deterministic
    simulation), lets the last of them start within the TTFT target's slack, and one more would not."""
    for mu, slo_ms, ttft_ms in ((12.5, 2000.0, 1000.0), (0.7, 5000.0, 800.0), (40.0, 300.0, 120.0)):
        q = waiting_threshold(slo_ms, ttft_ms, mu, 64)
        slack_s = (slo_ms - ttft_ms) / 1e3
        finish = [k / mu for k in range(1, q + 2)]  # when the k-th waiting request starts its service
        assert finish[q - 1] <= slack_s + 1e-9 or q == 1
        assert finish[q] > slack_s


def test_dynamo_planner_config(nvidia):
    """One prefill and one decode pool: a config of PlannerConfig's fields; its GPU budget, by hand, is the plan's
    GPUs plus what the power headroom buys at the dearest GPU, within the inventory."""
    plan, _cluster = nvidia
    two = plan.model_copy(update={"pools": [p for p in plan.pools if p.name != "pool2"]})
    watts = _watts(two)
    config, why = dynamo_planner(two, watts, adjustment_interval_s=600)
    assert not why
    for key, value in config.items():
        assert key in PLANNER_FIELDS, key
        assert PLANNER_FIELDS[key] is None or value in PLANNER_FIELDS[key], (key, value)
    assert (config["mode"], config["backend"], config["ttft"], config["itl"]) == ("disagg", "vllm", 1000.0,
                                                                                    two.slo_tpot_ms)
    pools = {p.name: p for p in two.pools}
    gpus = 2 * 10 + 1 * 16  # pool0: 10 decode replicas of 2 H200; pool1: 16 prefill replicas of 1 B200
    headroom = 70000.0 - sum(pools[n].replicas * w for n, w in watts.items())
    dearest = max(w / pools[n].devices_per_replica for n, w in watts.items())
    assert config["max_gpu_budget"] == gpus + min(32 + 16 - gpus, math.floor(headroom / dearest))
    assert (config["prefill_engine_num_gpu"], config["decode_engine_num_gpu"]) == (1, 2)
    none, why = dynamo_planner(plan, _watts(plan))
    assert none is None and "2 prefill pools" in why
