"""Serving under load: queueing, latency curves and the closed loop, against independent arithmetic."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from compiler.ir.precision import Precision
from cost_models.queueing import erlang_c, mdc_mean_wait_s, wait_percentile_s


def test_erlang_c_matches_the_closed_form_for_two_servers():
    # M/M/2 with offered load a: P(wait) = a^2 / (2 + a) / (1 + a + a^2 / (2 + a)) ... equivalently 2 rho^2 / (1 + rho).
    for rho in (0.1, 0.5, 0.9):
        assert erlang_c(2, 2 * rho) == pytest.approx(2 * rho**2 / (1 + rho), rel=1e-12)


def test_md1_mean_wait_is_the_pollaczek_khinchine_value():
    for rho in (0.2, 0.6, 0.95):
        assert mdc_mean_wait_s(1, rho, 2.0) == pytest.approx(rho * 2.0 / (2 * (1 - rho)), rel=1e-12)


def test_waits_rise_with_utilisation_and_grow_without_bound():
    waits = [wait_percentile_s(4, rho, 1.0, 0.9) for rho in (0.3, 0.6, 0.8, 0.9, 0.99, 0.999)]
    assert all(a <= b for a, b in zip(waits, waits[1:])) and waits[-1] > 100 * max(waits[2], 1e-3)
    assert math.isinf(wait_percentile_s(4, 1.0, 1.0, 0.9))


@pytest.fixture(scope="module")
def graph():
    from compiler.driver import block_graph

    return block_graph("llama-3.1-8b")


def _dep(device="nvidia-h100-sxm", engine="generic"):
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served

    return deployment(served(device, engine), 1, 1, 1, Precision.of("bf16"))


@pytest.mark.parametrize("engine", ["generic", "vllm"])
def test_colocated_tpot_at_concurrency_one_is_the_decode_only_batch_one_tpot(graph, engine):
    """A colocated step reads the weights once: one client's TPOT is a batch-1 decode step, not two weight reads."""
    from cost_models.load import RequestShape, closed_loop
    from cost_models.steps import decode_step

    dep = _dep(engine=engine)
    shape = RequestShape(1024, 256)
    loop = closed_loop(graph, dep, 1, shape)
    alone = decode_step(graph, dep, 1, shape.decode_context)
    assert loop.tpot_s == pytest.approx(alone.time_s, rel=0.05)


@pytest.mark.parametrize("prompt", [4096, 8000, 8192, 10000, 20000])
def test_one_clients_chunked_prompt_costs_its_tokens_not_whole_steps(graph, prompt):
    """[Note: a prompt's last chunk]: one client's prompt, chunked at the budget, costs about what the same tokens
    cost prefilled in one pass (the static path, `prefill_time`); a half step for the decode running ahead of it
    aside. Charging the last chunk as a full step made 8,192 tokens cost two 8,191-token steps (2.0x), 10,000 tokens
    1.6x and 20,000 1.2x."""
    from cost_models.load import RequestShape, closed_loop
    from cost_models.steps import decode_step, prefill_time

    dep = replace(_dep(), engine=_quiet_engine())
    shape = RequestShape(prompt, 256)
    loop = closed_loop(graph, dep, 1, shape)
    whole = prefill_time(graph, dep, 1, prompt).time_s
    half_decode = 0.5 * decode_step(graph, dep, 1, shape.decode_context).time_s
    assert loop.ttft_s - half_decode == pytest.approx(whole, rel=0.06)


def test_interference_follows_the_prefill_tokens_per_step(graph):
    """More prompt tokens per output token means more prefill work in each decode step."""
    from cost_models.load import RequestShape, closed_loop

    dep = _dep()
    light = closed_loop(graph, dep, 32, RequestShape(512, 512))   # 32 prompt tokens per step
    heavy = closed_loop(graph, dep, 32, RequestShape(4096, 128))  # 1,024 prompt tokens per step
    assert light.prefill_tokens_per_step == pytest.approx(32) and heavy.prefill_tokens_per_step == pytest.approx(1024)
    assert 1.0 <= light.interference < 1.1 < heavy.interference


@pytest.mark.parametrize("kind", ["colocated", "prefill", "decode"])
def test_latency_curves_rise_with_utilisation(graph, kind):
    from cost_models.load import (
        RequestShape, colocated_curve, decode_curve, decode_table, prefill_curve, prefill_table,
    )
    from cost_models.serving import memory_plan

    dep, shape = _dep(), RequestShape(2048, 256)
    table = decode_table(graph, dep, (1, 8, 64), shape)
    if kind == "colocated":
        rate, curve, parts = colocated_curve(graph, dep, 64, shape, table, 0.9)
    elif kind == "decode":
        rate, curve, parts = decode_curve(table, 64, shape.output_len, 0.9)
    else:
        rate, curve, parts = prefill_curve(prefill_table(graph, dep, (1, 2, 4), shape, memory_plan(graph, dep)), 4,
                                           0.0, 0.9)
    assert rate > 0
    for index in (1, 2, 3, 4):  # TTFT p50, TTFT p90, TPOT p50, TPOT p90
        values = [point[index] for point in curve]
        assert all(a <= b * (1 + 1e-12) for a, b in zip(values, values[1:])), (kind, index, values)
    assert all(p[2] >= p[1] and p[4] >= p[3] for p in curve)  # the 90th percentile is never below the median
    # [Note: TTFT parts]: one (queue, prefill) pair a point; the queue grows with load; the mean TTFT they make
    # with the front end (0 here for prefill; the engine's for colocated) is at least the median when the median
    # request waits for nothing, and the queue alone is the decode pool's whole TTFT wait
    assert len(parts) == len(curve) and all(q >= 0 and pf >= 0 for q, pf in parts)
    assert all(a[0] <= b[0] * (1 + 1e-12) for a, b in zip(parts, parts[1:])), parts
    front = dep.engine.request_overhead_s if kind == "colocated" else 0.0
    light = curve[0]
    assert front + sum(parts[0]) == pytest.approx(light[1], rel=0.02)  # 5% load: almost nothing waits
    if kind == "decode":
        assert all(pf == 0.0 for _q, pf in parts)


def _engine_costs(dep, **fields):
    """`dep` with its engine's fields changed, the per-step, per-block and per-call ones in its derate too."""
    from dataclasses import replace

    engine = replace(dep.engine, **fields)
    return replace(dep, engine=engine, derate=engine.applied_to(dep.derate))


# ------------------------------------------------------------------ overlap scheduling and waves, simulated
def simulate_pipeline(host_s: float, device_s: float, overlap: bool, steps: int = 400) -> tuple[float, float]:
    """An engine's step loop as events: the host prepares a step (taking `host_s`), then the device runs it
    (`device_s`, once the previous step is off the device). Without overlap the host prepares a step only once
    the last one is done; with it, as soon as the last one has gone to the device. A request that arrives
    joins the first step whose preparation starts after it and has its first token when that step ends.
    Returns the step period and the mean time from arrival to first token, arrivals spread evenly."""
    host_start, host_end, device_start, device_end = [0.0], [host_s], [host_s], [host_s + device_s]
    for _ in range(steps):
        start = max(host_end[-1], device_start[-1]) if overlap else device_end[-1]
        host_start.append(start)
        host_end.append(start + host_s)
        device_start.append(max(host_end[-1], device_end[-1]))
        device_end.append(device_start[-1] + device_s)
    period = (device_end[-1] - device_end[steps // 2]) / (steps - steps // 2)
    waits, k = [], steps // 2
    for i in range(1000):  # arrivals evenly over 50 periods in the steady state
        t = host_start[steps // 2] + 50 * period * (i + 0.5) / 1000
        while host_start[k] < t:
            k += 1
        waits.append(device_end[k] - t)
    return period, sum(waits) / len(waits)


def _quiet_engine(**fields):
    from cost_models.engines import Engine

    return Engine("quiet", **{"step_overhead_s": 0.0, "block_overhead_s": 0.0, "op_overhead_s": 0.0, **fields})


def _flat_steps(step_s: float, **fields):
    """Hand-built loop physics: every step (decode, mixed, chunk, wave) takes `step_s` on the device; a prompt
    fits one step; the prompts use a negligible share of the budget (no wait behind other prompts)."""
    from cost_models.load import LoopSteps, Wave

    base = dict(concurrency=8, active=8, output_len=100.0, mixed_s=step_s, mixed_sequences=8, chunk_s=step_s,
                chunk_sequences=8, last_chunk_s=step_s, last_chunk_sequences=8, prefill_tokens_per_step=1.0,
                decode_s=step_s, own_steps=1, prefill_rho=1e-9,
                wave=Wave(0, 0.0, 0.0, step_s, 8, 0.0, 1.0, 0.0, 0.0), blocks=0, dispatches=0)
    return LoopSteps(**{**base, **fields})


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("host_s,device_s", [(2e-3, 5e-3), (5e-3, 5e-3), (4e-3, 1e-3)])
def test_a_steps_wall_time_is_the_simulated_pipelines_period(overlap, host_s, device_s):
    """The host's preparation and the device's run, simulated: behind overlap the longer of the two sets the
    pace (each waits on the other), without it they add."""
    from cost_models.derates import derate_for

    period, _ttft = simulate_pipeline(host_s, device_s, overlap)
    engine = _quiet_engine(overlap=overlap, step_overhead_s=host_s)
    assert engine.step_s(device_s, host_s) == pytest.approx(period, rel=1e-9)
    loop = assemble_loop(_flat_steps(device_s), engine, derate_for("nvidia"))
    assert loop.tpot_s == pytest.approx(period, rel=1e-9) and loop.step_s == pytest.approx(period, rel=1e-9)


def assemble_loop(steps, engine, derate):
    from cost_models.load import assemble

    return assemble(steps, engine, derate, poisson=True)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("host_s,device_s", [(0.0, 5e-3), (2e-3, 5e-3), (5e-3, 5e-3), (4e-3, 1e-3)])
def test_time_to_first_token_is_the_simulated_pipelines(overlap, host_s, device_s):
    """A request that arrives mid-step waits half a period on average for the next preparation, then its own
    step; behind overlap the step already prepared runs first: one more device step, which in a host-bound
    pipeline (4 ms host, 1 ms device) costs its 1 ms on the device, not another 4 ms period. At no prompt
    contention (prefill_rho ~ 0), no front end and Poisson arrivals, that is the whole TTFT."""
    from cost_models.derates import derate_for

    _period, ttft = simulate_pipeline(host_s, device_s, overlap)
    loop = assemble_loop(_flat_steps(device_s), _quiet_engine(overlap=overlap, step_overhead_s=host_s),
                         derate_for("nvidia"))
    assert loop.ttft_s == pytest.approx(ttft, rel=0.01)


def simulate_waves(clients: int, prompt_tokens: int, output_len: int, budget_tokens: int, prefill_step_s,
                   decode_step_s: float, rounds: int = 3, spread_s: float = 1e-6) -> tuple[float, float]:
    """A scheduler that runs waiting prompts before any decode (SGLang's default), simulated event by event: a
    prefill step takes the prompts that have arrived, first come first served, up to `budget_tokens` (a prompt too
    long for what is left is chunked into the next step), takes `prefill_step_s(tokens)`, and gives a request its
    first token when its last chunk is done; a decode step gives every running request one token; an idle engine
    starts a step as soon as a prompt arrives. Closed-loop clients send their next request when the last one ends,
    client c `c x spread_s` later (one client after another, as a benchmark client sends and a front end takes
    them). Returns the mean TTFT and TPOT over every request of `rounds` rounds."""
    now, arrivals, waiting, running, first, sent = 0.0, [(c * spread_s, c) for c in range(clients)], [], {}, {}, {}
    ttfts, tpots = [], []
    while len(ttfts) < rounds * clients:
        for t, c in sorted(a for a in arrivals if a[0] <= now):
            arrivals.remove((t, c))
            waiting.append([c, prompt_tokens])
            sent[c] = t
        if waiting:  # a prefill step
            room, done = budget_tokens, []
            while waiting and room > 0:
                take = min(room, waiting[0][1])
                waiting[0][1] -= take
                room -= take
                if waiting[0][1] == 0:
                    done.append(waiting.pop(0)[0])
            now += prefill_step_s(budget_tokens - room)
            for c in done:
                first[c], running[c] = now, 1
        elif running:  # a decode step
            now += decode_step_s
            for c in list(running):
                running[c] += 1
                if running[c] == output_len:
                    del running[c]
                    ttfts.append(first[c] - sent[c])
                    tpots.append((now - first[c]) / (output_len - 1))
                    arrivals.append((now + c * spread_s, c))
        else:
            now = min(t for t, _c in arrivals)
    return sum(ttfts) / len(ttfts), sum(tpots) / len(tpots)


@pytest.mark.parametrize("clients,prompt", [(64, 4096), (16, 8192), (8, 1024), (12, 768), (3, 5000), (5, 10000)])
def test_a_wave_engines_ttft_and_tpot_are_the_simulated_schedulers(clients, prompt):
    """[Note: waves], [Note: a wave fills its steps], [Note: a round's first prompt comes alone]: the closed loop's
    wave terms against the scheduler simulated event by event, with a prefill step's time affine in its tokens and
    each round's prompts arriving a microsecond apart. The first prompt of a round is prefilled alone; the other
    63 prompts of 4,096 tokens then take 31 budget-sized steps and one of 4,096 (the simulation finds it), each
    request's first token comes at the end of its own step, and its decodes wait for the rest of the round's
    prefill. 11 prompts of 768 tokens after the first fill one step and leave 256 tokens to a second: the model
    before (one wave of 12 in two equal steps of 4,608) misses the simulated TTFT by 17% there and doubles its
    stall; prompts longer than what a step has left are chunked across steps."""
    from cost_models.derates import derate_for
    from cost_models.load import Wave, assemble, wave_counts

    budget, output_len, decode_s = 8192, 128, 0.02

    def prefill_s(tokens):
        return 0.01 + 30e-6 * tokens

    ttft, tpot = simulate_waves(clients, prompt, output_len, budget, prefill_s, decode_s)
    apart = _quiet_engine(mixes_prefill=False, prefill_budget_tokens=budget)
    lone = prompt <= budget
    full, rest, *counts = wave_counts(clients - lone, prompt, budget)
    wave = Wave(full, prefill_s(budget), clients, prefill_s(rest) if rest else 0.0, clients, *counts,
                *((1 / clients, prefill_s(prompt), 1) if lone else ()))
    steps = _flat_steps(decode_s, concurrency=clients, active=clients, output_len=float(output_len), wave=wave)
    loop = assemble(steps, apart, derate_for("nvidia"))
    assert apart.wave_share == 1.0
    assert loop.ttft_s == pytest.approx(ttft, rel=1e-3)
    assert loop.tpot_s == pytest.approx(tpot, rel=1e-3)
    if (clients, prompt) == (12, 768):  # what one wave of 12 in equal steps of W / ceil(W / B) tokens predicted
        equal = prefill_s(clients * prompt / 2)
        assert abs(1.5 * equal / ttft - 1) > 0.15 and 0.5 * equal / (output_len - 1) > 1.9 * (tpot - decode_s)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_step_whose_host_time_exceeds_its_device_time_costs_the_host_time_under_overlap(graph, overlap):
    """The step model and the closed loop agree: behind overlap the host hides the device, else they add."""
    from cost_models.load import RequestShape, closed_loop
    from cost_models.steps import decode_step

    bare = _engine_costs(_dep(engine="trtllm"), overlap=overlap, step_overhead_s=0.0, seq_overhead_s=0.0)
    device = decode_step(graph, bare, 1, 1152).time_s
    slow = _engine_costs(bare, step_overhead_s=10 * device)
    expected = 10 * device if overlap else 11 * device
    assert decode_step(graph, slow, 1, 1152).time_s == pytest.approx(expected, rel=1e-9)
    assert closed_loop(graph, slow, 1, RequestShape(1024, 256)).decode_only_step_s == pytest.approx(expected, rel=1e-6)


def test_the_closed_loop_pays_the_per_call_launch_floor_of_the_step_model(graph):
    """`assemble` adds the per-call overhead in closed form; `step` pays it per block through the roofline."""
    from cost_models.load import RequestShape, closed_loop
    from cost_models.steps import decode_step

    dep = _dep(engine="vllm")
    shape = RequestShape(1024, 256)
    slow = _engine_costs(dep, op_overhead_s=dep.engine.op_overhead_s + 5e-6)
    extra = closed_loop(graph, slow, 8, shape).decode_only_step_s - closed_loop(graph, dep, 8, shape).decode_only_step_s
    assert extra == pytest.approx(decode_step(graph, slow, 8, shape.decode_context).time_s
                                  - decode_step(graph, dep, 8, shape.decode_context).time_s, rel=1e-6)
    assert extra > 5e-6 * 32 * 50  # at least 50 calls in each of 32 layers


def test_releases_before_an_engines_overlap_default_step_synchronously():
    from backends.engines import engine_costs as engine

    assert not engine("vllm", "0.12.0").overlap and engine("vllm", "0.18.0").overlap and engine("vllm").overlap
    assert engine("trtllm", "1.0.0rc3").overlap and engine("trtllm", "gpt-oss-dev").overlap
    assert not engine("generic").overlap


def test_prompts_reach_a_step_whole_so_a_moe_step_reads_only_its_own_tokens_experts():
    """[Note: prompts arrive whole] Four clients of 512 x 128 tokens send one prompt per 32 steps: the mean step
    is 31 decode steps and one that carries the whole prompt, not 32 steps with 16 prompt tokens each. Spread
    out, the prompt would have every step of Qwen3-235B read 93 of 128 experts per layer, not 29, and predict
    24 ms per output token where TensorRT-LLM on 4 H100 measures 13.3 ms (../shared/reference/serving_sweeps.csv,
    c4 512 x 128 tp4)."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph
    from cost_models.load import RequestShape, closed_loop, loop_steps
    from cost_models.serving import memory_plan
    from cost_models.steps import Batch, step

    graph = block_graph("qwen3-235b-a22b")
    dep = deployment(served("nvidia-h100-sxm", "trtllm"), 4, 4, 1, Precision.of("fp8"))
    shape = RequestShape(512, 128)
    assert closed_loop(graph, dep, 4, shape).tpot_s == pytest.approx(13.3e-3, rel=0.25)
    steps = loop_steps(graph, dep, 4, shape)
    bare = replace(dep, derate=replace(dep.derate, step_overhead_s=0.0, block_overhead_s=0.0, op_overhead_s=0.0),
                   engine=replace(dep.engine, seq_overhead_s=0.0))  # the device time `loop_steps` holds
    plan = memory_plan(graph, bare, graph.kv_bytes_per_sequence(shape.kv_tokens, dep.precision) * 4 / 4)

    def carrying(tokens: float) -> float:
        return step(graph, bare, Batch(decodes=4, context=shape.decode_context, prefill_tokens=tokens,
                                       prefill_requests=1.0), plan).time_s

    decode = step(graph, bare, Batch(decodes=4, context=shape.decode_context), plan).time_s
    assert steps.chunk_s == pytest.approx(carrying(512), rel=1e-9)
    assert steps.mixed_s == pytest.approx((31 * decode + carrying(512)) / 32, rel=1e-9)
    assert steps.mixed_s < 0.8 * carrying(16)


def test_a_device_streams_at_one_efficiency_whichever_engine_serves_it(graph):
    """One efficiency per device: a batch-1 decode of the same model on one H100 reads its weights and KV at the same
    bandwidth under no engine, vLLM and TensorRT-LLM (the engines differ in overheads only), at the H100's own fitted
    share of its 3.35 TB/s datasheet peak; a B200, with no serving rows of its own, at the NVIDIA family's share; an
    MI300X at AMD's, whatever engine is named."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from cost_models.derates import DERATES, DEVICE_EFFS
    from cost_models.serving import memory_plan
    from cost_models.steps import Batch, step

    bf16 = Precision.of("bf16")

    def memory_s(device_id: str, engine: str) -> float:
        dep = deployment(served(device_id, engine), 1, 1, 1, bf16)
        return step(graph, dep, Batch(decodes=1, context=512), memory_plan(graph, dep)).memory_s

    h100 = {e: memory_s("nvidia-h100-sxm", e) for e in ("generic", "vllm", "trtllm", "sglang")}
    assert max(h100.values()) == pytest.approx(min(h100.values()), rel=1e-12)
    # the same bytes at another share of the same peak: the time scales by the ratio of the shares
    at_family = replace(deployment(served("nvidia-h100-sxm"), 1, 1, 1, bf16), derate=DERATES["nvidia"])
    family_s = step(graph, at_family, Batch(decodes=1, context=512), memory_plan(graph, at_family)).memory_s
    assert h100["vllm"] == pytest.approx(family_s * DERATES["nvidia"].mem_eff / DEVICE_EFFS["nvidia-h100-sxm"]["mem_eff"],
                                         rel=1e-9)
    assert "nvidia-b200" not in DEVICE_EFFS
    for device_id, family in (("nvidia-b200", "nvidia"), ("amd-mi300x", "amd")):
        for e in ("generic", "vllm"):
            assert deployment(served(device_id, e), 1, 1, 1, bf16).derate.mem_eff == DERATES[family].mem_eff


def test_fp8_matmuls_run_at_their_own_share_of_the_fp8_peak(graph):
    """An H100's FP8 peak is twice its BF16 one: at half BF16's efficiency an FP8 prompt's matmuls take as long as
    BF16's (the step is compute-bound), at the same efficiency half as long (`Derate.matmul_eff`)."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from cost_models.serving import memory_plan
    from cost_models.steps import Batch, step

    def compute_s(dtype: str, fp8_eff: float | None) -> float:
        dep = deployment(served("nvidia-h100-sxm"), 1, 1, 1, Precision.of(dtype))
        dep = replace(dep, derate=replace(dep.derate, fp8_compute_eff=fp8_eff))
        return step(graph, dep, Batch(prefill_tokens=8192, prefill_requests=1), memory_plan(graph, dep)).compute_s

    bf16 = compute_s("bf16", 0.1)  # a BF16 step never reads the FP8 share
    assert bf16 == pytest.approx(compute_s("bf16", None), rel=1e-12)
    half = deployment(served("nvidia-h100-sxm"), 1, 1, 1, Precision.of("fp8")).derate.compute_eff / 2
    assert compute_s("fp8", half) == pytest.approx(bf16, rel=0.05)
    assert compute_s("fp8", None) == pytest.approx(bf16 / 2, rel=0.05)


def _prefill_first_loop(clients: int, prompt: int, outputs, rounds: int, seed: int = 0) -> float:
    """Mean TTFT after the first round of a discrete-event closed loop under SGLang's default rule (a waiting prefill
    runs before the decode batch, decodes pause while it runs): `clients` clients, each sending its next request a
    front-end delay (uniform in [0, 20 ms]) after its last one ended; output lengths drawn by `outputs(rng)`.
    Steps: prefill 5 ms + 20 us per prompt token, decode 10 ms + 0.1 ms per running sequence."""
    import random

    rng = random.Random(seed)
    now, arrivals, running, ttfts, served = 0.0, [(0.0, c) for c in range(clients)], {}, [], 0
    while served < rounds * clients:
        ready = [(t, c) for t, c in arrivals if t <= now]
        if ready:  # one prefill step of every prompt waiting
            now += 5e-3 + 20e-6 * prompt * len(ready)
            for t, c in ready:
                arrivals.remove((t, c))
                running[c] = outputs(rng) - 1
                served += 1
                if served > clients:
                    ttfts.append(now - t)
        elif running:
            now += 10e-3 + 0.1e-3 * len(running)
            for c in list(running):
                running[c] -= 1
                if running[c] == 0:
                    del running[c]
                    arrivals.append((now + rng.uniform(0, 20e-3), c))
        else:
            now = min(t for t, _c in arrivals)
    return statistics.fmean(ttfts)


def test_lengths_that_vary_dissolve_the_waves_as_a_simulated_prefill_first_engine_does():
    """[Note: waves]: under a prefill-first engine, clients with equal lengths come back in one wave every round, so
    a request waits for the whole wave's prefill; with lengths drawn from [0.8 L, L] they spread out and a request
    waits for about its own. The closed loop (`assemble`, costed here with the simulation's step times and no
    overheads) against a discrete-event simulation of the scheduler rule, in both regimes; predicting waves for the
    varied lengths (the model before `lockstep`) is 3x off. With equal lengths the first of each round's arrivals is
    prefilled alone and the rest, arriving within 20 ms, wait for it ([Note: a round's first prompt comes alone]):
    311 ms predicted against 302 simulated, where one wave of all 16 predicts 325."""
    from cost_models.derates import Derate
    from cost_models.engines import Engine
    from cost_models.load import LoopSteps, Wave, assemble

    clients, prompt, out = 16, 1000, 1000
    fixed = _prefill_first_loop(clients, prompt, lambda rng: out, rounds=5)
    varied = _prefill_first_loop(clients, prompt, lambda rng: rng.randint(int(0.8 * out), out), rounds=8)
    mean_out = 0.9 * out
    decode = 10e-3 + 0.1e-3 * clients
    own = 5e-3 + 20e-6 * prompt  # one prompt's prefill step
    rest = 5e-3 + 20e-6 * prompt * (clients - 1)  # the rest of the round's, after the first prompt's alone
    mixed = decode + clients * own / mean_out  # a decode step plus the prefills that interrupt it, per output token
    steps = LoopSteps(concurrency=clients, active=clients, output_len=mean_out, mixed_s=mixed,
                      mixed_sequences=clients, chunk_s=own, chunk_sequences=1, last_chunk_s=own,
                      last_chunk_sequences=1, prefill_tokens_per_step=0.0, decode_s=decode, own_steps=1,
                      prefill_rho=clients * own / (mean_out * mixed),
                      wave=Wave(0, 0.0, 0.0, rest, clients, 0.0, 1.0, 0.0, 0.0, 1 / clients, own, 1),
                      blocks=0, dispatches=0)
    engine, derate = Engine("prefill-first", mixes_prefill=False), Derate(compute_eff=1.0, mem_eff=1.0)
    in_waves = assemble(steps, engine, derate).ttft_s
    spread = assemble(steps, engine, derate, lockstep=False).ttft_s
    assert in_waves == pytest.approx(fixed, rel=0.05)
    assert spread == pytest.approx(varied, rel=0.25)
    assert in_waves > 3 * varied
