"""Limits engines have, and ones they do not: replicated KV heads and clients beyond the KV cache, by hand.

[Note: replicated KV heads] (cost_models/serving.py) and [Note: clients beyond the slots] (cost_models/load.py)
give the rules; the expectations here come from the model's config and from a discrete simulation.
"""

from __future__ import annotations

import heapq
import json

import pytest

from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision
from tests.conftest import preset_config

MODEL = "llama-3.1-8b"  # 32 layers, 32 attention heads, 8 KV heads of 128 dims
LAYERS, KV_HEADS, HEAD_DIM, BF16_BYTES = 32, 8, 128, 2


@pytest.fixture(scope="module")
def graphs():
    from compiler.driver import block_graph

    return {MODEL: block_graph(MODEL)}


def _estimate(graphs, **kw):
    from compiler.driver import estimate

    args = dict(device="nvidia-h100-sxm", count=1, tp=None, pp=1, precision=Precision.of("bf16"), input_len=1024,
                output_len=256, batch=None, concurrency=None)
    return estimate(MODEL, **{**args, **kw}, graphs=graphs)


def test_tp_above_the_kv_heads_holds_one_head_per_rank(graphs):
    """tp 16 over 8 KV heads: each rank holds one whole head per token and layer, K and V, not half of one."""
    tokens = 1024 + 256
    r = _estimate(graphs, count=16, tp=16, batch=1)
    weights_per_rank = graphs[MODEL].weight_bytes(Precision.of("bf16")) / 16
    one_head = 1 * HEAD_DIM * 2 * LAYERS * BF16_BYTES  # per token: one KV head x (K, V) x layers x bf16
    assert r.memory_bytes - weights_per_rank == pytest.approx(tokens * one_head, rel=1e-9)
    # At tp 8 the 8 heads split evenly: the same one head per rank, so the same KV bytes per rank.
    r8 = _estimate(graphs, count=8, tp=8, batch=1)
    assert r8.memory_bytes - weights_per_rank * 2 == pytest.approx(tokens * one_head, rel=1e-9)


def test_replicated_heads_double_the_kv_read_per_rank():
    """A decode attention block at tp 16: each rank reads its whole head, twice the 1/16 an even split would."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph
    from cost_models.derates import Derate
    from cost_models.roofline import block_time

    graph = block_graph(MODEL)
    dep = deployment(served("nvidia-h100-sxm"), 16, 16, 1, Precision.of("bf16"), kv_heads=KV_HEADS)
    attn = next(b for b in graph.phase_blocks("decode") if b.role == "attn")
    ideal = Derate.ideal()
    point = {"B": 4, "L": 4096}
    kw = dict(precision=dep.precision, derate=ideal, shards=16)
    replicated = block_time(attn, point, dep.device, kv_shards=dep.kv_shards, **kw).memory_s
    even = block_time(attn, point, dep.device, **kw).memory_s
    # B x tokens x heads x dims x (K, V) x bytes: each sequence reads L + 1 cached tokens (its new one included)
    # and writes its new one
    layer_kv_read = 4 * (4096 + 2) * KV_HEADS * HEAD_DIM * 2 * BF16_BYTES
    hbm = dep.device.memory[0].bw_bytes_per_s
    assert dep.kv_shards == 8
    assert replicated - even == pytest.approx(layer_kv_read * (1 / 8 - 1 / 16) / hbm, rel=1e-6)


def test_tp_above_the_kv_heads_is_answered(graphs):
    """The published shapes refused before (Llama-2-70B at tp 16 on Neuron, Qwen3-235B at tp 8) are answered."""
    r = _estimate(graphs, count=16, tp=16, concurrency=32, engine="vllm")
    assert r.fits and r.tpot_ms > 0


def _simulate_closed_loop(clients: int, slots: int, service_s: float, completions: int = 20000) -> tuple[float, float]:
    """Discrete events: `clients` each resubmit on completion, FIFO queue, `slots` servers, deterministic service.
    Returns (completions per second, mean response time, the queue included) over the whole run."""
    queue = list(range(clients))  # client ids waiting, all at t = 0
    submitted = {c: 0.0 for c in queue}
    running: list[tuple[float, int]] = []
    t, responses = 0.0, []
    while len(responses) < completions:
        while queue and len(running) < slots:
            heapq.heappush(running, (t + service_s, queue.pop(0)))
        t, c = heapq.heappop(running)
        responses.append(t - submitted[c])
        submitted[c] = t
        queue.append(c)
    return len(responses) / t, sum(responses) / len(responses)


@pytest.mark.parametrize("clients,slots", [(8, 4), (5, 2), (12, 3)])
def test_littles_law_matches_a_discrete_simulation(clients, slots):
    """Throughput B / S and response C x S / B, the two sides of [Note: clients beyond the slots]."""
    throughput, response = _simulate_closed_loop(clients, slots, 2.0)
    assert throughput == pytest.approx(slots / 2.0, rel=2e-3)
    assert response == pytest.approx(clients * 2.0 / slots, rel=2e-3)


def test_twice_the_clients_the_kv_holds_queue_for_one_life(graphs):
    """C = 2B: the throughput of C = B (the KV bound), the same TPOT, and TTFT longer by one request's life S."""
    long = dict(input_len=65536, output_len=64, engine="vllm")
    fit = _estimate(graphs, batch="max", **long).max_batch
    assert 2 <= fit < 64  # the KV, not the engine's max batch, binds
    at_b = _estimate(graphs, concurrency=fit, **long)
    at_2b = _estimate(graphs, concurrency=2 * fit, **long)
    assert at_2b.fits and at_2b.batch == 2 * fit and at_2b.max_batch == fit
    life_s = at_b.ttft_ms / 1e3 + (64 - 1) * at_b.tpot_ms / 1e3
    assert at_2b.tpot_ms == pytest.approx(at_b.tpot_ms, rel=1e-9)
    assert at_2b.ttft_ms / 1e3 - at_b.ttft_ms / 1e3 == pytest.approx((2 * fit - fit) * life_s / fit, rel=1e-9)
    assert at_2b.output_tokens_per_s == pytest.approx(at_b.output_tokens_per_s, rel=1e-9)
    # The KV held is B sequences', not 2B's.
    assert at_2b.memory_bytes == pytest.approx(at_b.memory_bytes, rel=1e-9)


def test_the_closed_loop_rate_counts_the_waiting_clients(graphs):
    """`requests_per_s` is C / R: with 3B clients it equals B / S, the rate at B."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from cost_models.load import RequestShape, closed_loop

    dep = deployment(served("nvidia-h100-sxm", "vllm"), 1, 1, 1, Precision.of("bf16"))
    shape = RequestShape(1024, 256)
    at_b = closed_loop(graphs[MODEL], dep, 16, shape, slots=16)
    at_3b = closed_loop(graphs[MODEL], dep, 48, shape, slots=16)
    assert at_3b.requests_per_s(256) == pytest.approx(at_b.requests_per_s(256), rel=1e-9)


@pytest.mark.parametrize("tp,engine,needles", [
    (64, "generic", ("--tp 64", "32 attention heads", "no engine")),
    (12, "vllm", ("--tp 12", "vLLM splits attention heads evenly")),
])
def test_what_no_engine_runs_is_refused_naming_the_rule(graphs, tp, engine, needles):
    with pytest.raises(BadInput) as e:
        _estimate(graphs, count=tp, tp=tp, batch=1, engine=engine)
    assert all(n in str(e.value) for n in needles)


def test_kv_heads_must_divide_or_be_divided_by_tp_for_even_splitting_engines(tmp_path):
    """24 query heads over 8 KV heads: tp 12 divides the query heads but neither divides 8 nor is a multiple of
    it, so vLLM's replication rule has no split; tp 24 replicates each KV head 3 times; a generic engine pads."""
    from compiler.driver import estimate

    config = {**preset_config("llama-tiny"), "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 4,
              "hidden_size": 96}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = dict(device="cpu-host", pp=1, precision=Precision.of("fp32"), input_len=16, output_len=4, batch=1,
                concurrency=None)
    with pytest.raises(BadInput, match="multiple of it"):
        estimate(str(path), count=12, tp=12, engine="vllm", **args)
    assert estimate(str(path), count=24, tp=24, engine="vllm", **args).fits
    assert estimate(str(path), count=12, tp=12, engine="generic", **args).fits
