"""Silicon that is not an HBM GPU: memory tiers, pipelines that fill.

Expected values come from the catalog's published numbers and hand arithmetic (bytes over capacity, the
pipeline bubble formula), never from the code under test.
"""

from __future__ import annotations

import math
import random

import pytest

from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision

BF16, FP8 = Precision.of("bf16"), Precision.of("fp8")
LLAMA_70B_PARAMS = 70.55e9  # Llama 3.1 70B (hidden 8192, 80 layers, vocab 128256)


@pytest.fixture(scope="module")
def g70():
    from compiler.driver import block_graph

    return block_graph("llama-3.1-70b")


def _dep(device_id, count, tp, pp=1, precision=BF16):
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served

    return deployment(served(device_id), count, tp, pp, precision)


def _estimate(g, dep, **kw):
    from compiler.cost.estimate import estimate

    return estimate(g, dep, input_len=kw.pop("input_len", 1024), output_len=kw.pop("output_len", 256), **kw)


# ------------------------------------------------------------------------------------------ memory tiers


def test_one_wafer_does_not_hold_70b_and_says_how_many_wafers_do(g70):
    # 70.55e9 params x 2 bytes = 141 GB; 44 GB of SRAM per CS-3 (less the 2% runtime reserve) -> 4 wafers.
    wafers = math.ceil(LLAMA_70B_PARAMS * 2 / (44e9 * 0.98))
    assert wafers == 4
    with pytest.raises(BadInput) as e:
        _estimate(g70, _dep("cerebras-cs3", 1, 1), batch=1)
    message = str(e.value)
    assert "44 GB sram" in message and "external memory does not serve" in message
    assert f"--pp {wafers} --count {wafers}" in message  # no scale-up fabric between wafers: pipeline only


def test_four_wafers_hold_70b_in_sram_with_nothing_read_from_memoryx(g70):
    r = _estimate(g70, _dep("cerebras-cs3", 4, 1, pp=4), batch=1)
    assert r.weight_tiers == {"sram": 1.0} and r.kv_tiers == {"sram": 1.0}
    assert r.slow_tiers == []
    # Per wafer: a quarter of the weights, within 44 GB.
    assert r.memory_bytes == pytest.approx(LLAMA_70B_PARAMS * 2 / 4, rel=0.02)


def test_a_tier_that_does_not_serve_is_never_used():
    from backends.registry import device
    from compiler.driver import block_graph
    from cost_models.serving import memory_plan

    cs3 = device("cerebras-cs3")
    assert [t.name for t in cs3.serving_tiers] == ["sram"] and cs3.capacity_bytes == 44e9
    g405 = block_graph("llama-3.1-405b")  # 810 GB at bf16: more than 16 wafers' SRAM (704 GB), less than MemoryX
    plan = memory_plan(g405, _dep("cerebras-cs3", 16, 1, pp=16))
    assert not plan.fits
    assert all(name == "sram" for name, _ in plan.weight_tiers.fractions)


def test_corsair_sram_resident_decode_is_5x_faster_than_16_cards_reading_lpddr(g70):
    # fp8: 70.55 GB of weights; 2 GB of SRAM per Corsair card -> 36 cards hold them in SRAM alone,
    # 8-way tensor parallel per server and 5 pipeline stages = 40 cards.
    cards = math.ceil(LLAMA_70B_PARAMS * 1.0 * 1.02 / (2e9 * 0.98))
    assert cards == 37
    resident = _estimate(g70, _dep("dmatrix-corsair", 40, 8, pp=5, precision=FP8), batch=1)
    lpddr = _estimate(g70, _dep("dmatrix-corsair", 16, 8, pp=2, precision=FP8), batch=1)
    assert resident.weight_tiers == {"sram": 1.0}
    assert lpddr.weight_tiers["dram"] > 0.5 and lpddr.slow_tiers == ["dram"]  # the slow figure is labelled
    assert lpddr.resident_devices == cards
    assert lpddr.tpot_ms >= 5 * resident.tpot_ms


def test_compile_generates_the_sram_resident_corsair_option(g70):
    from compiler.cost.pool_options import enumerate_options
    from compiler.inputs import load_cluster, load_workload

    cluster = load_cluster("examples/clusters/dmatrix.yaml")  # 64 cards
    options, _ = enumerate_options(g70, cluster, load_workload("examples/workloads/chat.yaml"), FP8)
    groups = {o.devices_per_replica for o in options}
    assert 40 in groups  # tp 8 x pp 5: the SRAM-resident shape
    resident = [o for o in options if o.devices_per_replica == 40]
    assert all(dict(o.detail)["weights_in"] == "sram" for o in resident)
    assert any(dict(o.detail)["weights_in"] != "sram" for o in options if o.devices_per_replica < 36)


# ------------------------------------------------------------------------------------------ pipelines that fill


def test_pipelined_prefill_of_a_batch_nears_pp_times_stage_after_stage(g70):
    from cost_models.steps import prefill_time

    dep = _dep("nvidia-h100-sxm", 4, 1, pp=4)
    k, pp = 16, 4
    serial = prefill_time(g70, dep, k, 2048, micro_batches=1).time_s
    pipelined = prefill_time(g70, dep, k, 2048).time_s
    bubble = k * pp / (k + pp - 1)  # k prompts through pp stages: (k + pp - 1) stage times instead of k * pp
    assert 3.0 <= serial / pipelined <= bubble * 1.001


def test_weight_bound_decode_is_not_faster_with_micro_batches_but_holds_pp_times_the_sequences(g70):
    from cost_models.steps import decode_step

    dep = _dep("nvidia-h100-sxm", 4, 1, pp=4)
    context = 256  # short: the KV read is a few percent of the weights, so the step streams weights
    serial = decode_step(g70, dep, 16, context, micro_batches=1).time_s
    pipelined = decode_step(g70, dep, 16, context).time_s
    assert pipelined >= 0.95 * serial  # each micro-batch streams its stage's weights again
    # The gain: four micro-batches of 16 take about the step one batch of 16 took stage after stage.
    four_times = decode_step(g70, dep, 64, context).time_s
    assert four_times == pytest.approx(serial, rel=0.05)


def test_pipeline_hops_between_wafers_cross_ethernet(g70):
    from backends.registry import device
    from cost_models.steps import decode_step

    dep = _dep("cerebras-cs3", 4, 1, pp=4)
    hops = decode_step(g70, dep, 1, 1024).comm_s  # per device: a quarter of the 3 hops
    link = device("cerebras-cs3").scale_out
    hidden_bytes = 8192 * 2
    one_hop = link.latency_s + hidden_bytes / (link.bw_bytes_per_s * dep.derate.link_eff)
    assert hops == pytest.approx(3 * one_hop / 4, rel=0.01)


# ------------------------------------------------------------------------------------------ attention/FFN ping-pong


@pytest.fixture(scope="module")
def moe():
    from compiler.driver import block_graph

    return block_graph("mixtral-8x22b")  # MegaScale-Infer's model (141B, 8 experts, top-2)


def _af_shape(m_groups, n_groups, micro, bw, latency):
    from cost_models.af import AFShape

    one = _dep("nvidia-h100-sxm", 1, 1)
    return AFShape(one, one, m_groups, n_groups, micro, bw, latency)


def _best_plain_per_device(g, context, kv_tokens):
    """Best decode output tokens/s per device of one tensor-parallel group on H100s, at every batch that fits."""
    from cost_models.serving import max_batch, memory_plan
    from cost_models.steps import decode_step

    best = 0.0
    for tp in (4, 8):
        dep = _dep("nvidia-h100-sxm", tp, tp)
        fits = max_batch(memory_plan(g, dep).kv_capacity_bytes * tp, g.kv_bytes_per_token(BF16), [kv_tokens])
        for batch in (64, 128, 256, 512, 1024, 2048):
            if batch <= fits:
                best = max(best, batch / decode_step(g, dep, batch, context).time_s / tp)
    return best


def test_af_step_is_the_ring_s_slowest_stage_not_the_sum(moe):
    from cost_models.af import af_decode_step

    nic = 50e9
    serial = af_decode_step(moe, _af_shape(8, 4, 1, nic, 5e-6), 128, 1152)
    layers = 56
    ta, tf, tc = serial.attn_s, serial.ffn_s, serial.transfer_s
    edges_and_host = serial.time_s - layers * (ta + tf + 2 * tc)
    assert edges_and_host >= 0
    pingpong = af_decode_step(moe, _af_shape(8, 4, 2, nic, 5e-6), 128, 1152)
    ta2, tf2, tc2 = pingpong.attn_s, pingpong.ffn_s, pingpong.transfer_s
    # Two micro-batches of 64: a layer takes the slowest stage twice, or one round trip if that is longer.
    layer = max(2 * max(ta2, tf2, tc2), ta2 + tf2 + 2 * tc2)
    assert pingpong.time_s == pytest.approx(layers * layer + edges_and_host, rel=0.02)
    assert pingpong.time_s < serial.time_s


def test_af_steps_sharing_a_memo_equal_steps_costed_alone(moe):
    """An M:N search shares one memo of each side's costing over its shapes (`af_decode_step`): a key that
    missed what a side depends on (batch, micro-batches, FFN groups, context) would hand one shape another's."""
    from dataclasses import replace

    from cost_models.af import AFShape, af_decode_step

    one, two = _dep("nvidia-h100-sxm", 1, 1), _dep("nvidia-h100-sxm", 2, 2)
    rng = random.Random(7)
    memo: dict = {}
    for _ in range(200):
        shape = AFShape(one, rng.choice((one, two)), rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 4)),
                        rng.choice((1, 2, 3)), 50e9, 5e-6)
        batch, context = rng.choice((8, 32, 128)), rng.choice((512, 1152))
        shared = af_decode_step(moe, shape, batch, context, memo=memo)
        alone = af_decode_step(moe, replace(shape, attn=replace(one), ffn=replace(shape.ffn)), batch, context)
        assert shared == alone


def test_af_beats_plain_decode_per_device_when_ping_pong_hides_transfers_and_loses_on_a_slow_link(moe):
    from cost_models.af import af_decode_step

    context, kv_tokens = 1024 + 128, 1024 + 256
    plain = _best_plain_per_device(moe, context, kv_tokens)
    # 32 attention GPUs of 128 sequences each feed 16 expert GPUs: each H100's 400 Gb/s NIC hides the transfers.
    fast = _af_shape(32, 16, 3, 50e9, 5e-6)
    step = af_decode_step(moe, fast, 128, context)
    assert step.transfer_s < max(step.attn_s, step.ffn_s)  # hidden behind compute
    assert 32 * 128 / step.time_s / fast.devices > plain
    slow = _af_shape(32, 16, 3, 1e9, 50e-6)  # 8 Gb/s per device: the hidden states dominate every layer
    step = af_decode_step(moe, slow, 128, context)
    assert step.bound == "transfer"
    assert 32 * 128 / step.time_s / slow.devices < plain


def test_compile_offers_af_on_one_device_type_for_a_large_moe(moe, tmp_path):
    from compiler.cost.pool_options import enumerate_options
    from compiler.inputs import load_cluster, load_workload

    cluster = tmp_path / "h100.yaml"
    cluster.write_text("name: h100s\ndevices:\n  - {device: nvidia-h100-sxm, count: 64}\n")
    options, _ = enumerate_options(moe, load_cluster(cluster), load_workload("examples/workloads/chat.yaml"), BF16)
    out_len = 256
    per_device = lambda o: o.classes[0].rate_per_s * out_len / o.devices_per_replica  # noqa: E731
    af = [o for o in options if o.kind == "decode-af"]
    assert af and all(o.device_types == ("nvidia-h100-sxm",) for o in af)
    plain = max(per_device(o) for o in options if o.kind == "decode")
    assert max(per_device(o) for o in af) > plain


# ------------------------------------------------------------------------------------------ drafters on their own chips


def _drafting_fleet(tmp_path, acceptance):
    cluster = tmp_path / "fleet.yaml"
    cluster.write_text(
        "name: h100-and-corsair\npower_budget_kw: 12\ndevices:\n"
        "  - {device: nvidia-h100-sxm, count: 8}\n  - {device: dmatrix-corsair, count: 8}\n"
        "links:\n  - {between: [nvidia-h100-sxm, dmatrix-corsair], bandwidth_gb_per_s: 50, latency_us: 10}\n")
    workload = tmp_path / f"chat_{acceptance}.yaml"
    workload.write_text(
        "name: chat-drafted\nclasses:\n"
        "  - {name: chat, share: 1, input_len: {mean: 1024, max: 4096}, output_len: {mean: 256, max: 1024}}\n"
        "slo: {ttft_ms: 2000, tpot_ms: 20}\n"
        f"speculative: {{drafter: llama-3.2-1b, acceptance_rate: {acceptance}, draft_tokens: 4}}\n")
    return str(cluster), str(workload)


def test_round_time_counts_drafts_verify_and_transfers(g70):
    from compiler.driver import block_graph
    from cost_models.serving import memory_plan
    from cost_models.steps import Batch, decode_step, prefill_time, step
    from cost_models.speculative import Drafting, speculative_round

    draft_graph = block_graph("llama-3.2-1b")
    target = _dep("nvidia-h100-sxm", 4, 4)
    drafter = _dep("dmatrix-corsair", 1, 1, precision=FP8)
    drafting = Drafting(draft_graph, drafter, 0.8, 4, 50e9, 10e-6)
    r = speculative_round(g70, target, drafting, 16, 1152, 1024, 256)
    plan = memory_plan(g70, target, g70.kv_bytes_per_sequence(1152, BF16) * 16 / 4)
    verify = step(g70, target, Batch(decodes=16, context=1152, prefill_tokens=64, prefill_requests=16,
                                     prefill_before=1152, every_logit=True), plan).time_s  # logits for every draft
    tokens = 1 + 0.8 + 0.8**2 + 0.8**3 + 0.8**4
    drafts = 4 * decode_step(draft_graph, drafter, 16, 1152).time_s \
        + 16 * tokens / 256 * prefill_time(draft_graph, drafter, 1, 1024).time_s
    wire = 2 * 10e-6 + (16 * 4 * 8 + 16 * 8) / 50e9
    assert r.time_s == pytest.approx(verify + drafts + wire, rel=1e-6)
    assert r.tpot_s == pytest.approx(r.time_s / tokens)
    # Verifying k + 1 tokens reads the weights and the KV once: far cheaper than k + 1 decode steps.
    assert verify < 1.5 * decode_step(g70, target, 16, 1152).time_s


@pytest.mark.parametrize("acceptance, drafts", [(0.9, True), (0.3, False)])
def test_idle_small_devices_draft_for_the_gpu_target_only_when_drafts_are_accepted(tmp_path, acceptance, drafts):
    from compiler.driver import prepare
    from compiler.place.ilp import solve

    prep = prepare("llama-3.1-70b", *_drafting_fleet(tmp_path, acceptance))
    offered = [o for o in prep.options if dict(o.detail).get("draft_device") == "dmatrix-corsair"]
    assert offered  # a bf16 70B cannot run on Corsair, but a 1B fp8 drafter can
    sol = solve(prep.instance, "throughput", time_limit_s=60)
    used = [o for o, _n in sol.used() if "draft_device" in dict(o.detail)]
    assert bool(used) == drafts
    if drafts:
        assert {dict(o.detail)["draft_device"] for o in used} == {"dmatrix-corsair"}


def test_a_drafting_plan_names_its_drafter_pool_per_the_runtime_contract(tmp_path):
    from compiler.driver import compile

    plan = compile("llama-3.1-70b", *_drafting_fleet(tmp_path, 0.9), baselines=False, analyse=False).plan
    drafters = {p.name: p for p in plan.pools if p.role == "drafter"}
    targets = [p for p in plan.pools if p.draft is not None]
    assert drafters and targets
    for t in targets:
        d = drafters[t.draft.pool]
        assert t.role == "decode" and t.draft.model == "llama-3.2-1b" and t.draft.k == 4
        assert t.draft.predicted_acceptance_rate == 0.9
        assert d.device == "dmatrix-corsair" and d.phases == ["prefill", "decode"] and d.replicas == t.replicas
        assert d.stages[0].blocks[0] == "prefill/embed" and d.stages[-1].blocks[-1] == "decode/head"
        assert any(x.kind == "draft" and x.src_pool == d.name and x.dst_pool == t.name for x in plan.transfers)
