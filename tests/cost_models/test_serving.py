"""The serving model: the talk's claims as tests, and each function against hand arithmetic."""

from __future__ import annotations

import pytest

from cost_models.comm import all_to_all_s, allreduce_s, kv_handoff_s, p2p_s
from cost_models.power import device_power_w, energy_per_token_j
from compiler.ir.precision import Precision
from cost_models.serving import max_batch
from cost_models.speculative import expected_tokens

BF16 = Precision.of("bf16")


@pytest.fixture(scope="module")
def graphs():
    from compiler.driver import block_graph

    return {m: block_graph(m) for m in ("llama-3.1-8b", "llama-3.1-70b")}


def _dep(device_id, count, tp, dtype="bf16", pp=1, buckets=None):
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served

    return deployment(served(device_id), count, tp, pp, Precision.of(dtype), buckets=buckets)


# Llama-3.1-70B from its Hugging Face config.json: hidden 8192, 80 layers, 64 query heads and 8 KV heads of 128,
# intermediate 28672, vocabulary 128256, untied embeddings. Per layer: q and o 8192^2 each, k and v 8192 x 1024,
# gate/up/down 3 x 8192 x 28672, two RMSNorms; plus embedding and LM head, and the final norm.
LLAMA_70B_PARAMS = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 2 * 128256 * 8192 + 8192
H100_BF16_FLOP_PER_S, H100_HBM_BYTES_PER_S = 989e12, 3.35e12  # datasheet: dense BF16, HBM3


def test_claim_a_decode_is_memory_bound_and_long_prefill_compute_bound(graphs):
    """Hand roofline of Llama-3.1-70B on 8 H100s (TP8): a batch-1 decode step streams each device's 2 bytes per
    weight (P/8 weights) for 2 FLOPs per weight, so memory takes ~300x the compute; a prefill of S tokens does 2 S
    FLOPs per weight for the same bytes. The step model's memory and compute times must be those, at the
    derate's efficiencies (embedding rows are gathered, not streamed: 1.5% of the bytes; attention adds ~2% of
    the FLOPs at 2,048 tokens)."""
    from cost_models.steps import decode_step, prefill_time

    g, dep = graphs["llama-3.1-70b"], _dep("nvidia-h100-sxm", 8, 8)
    assert g.params_total == LLAMA_70B_PARAMS == 70_553_706_496
    bytes_per_s = H100_HBM_BYTES_PER_S * dep.derate.mem_eff
    flop_per_s = H100_BF16_FLOP_PER_S * dep.derate.compute_eff
    weights_per_device = LLAMA_70B_PARAMS / 8
    decode = decode_step(g, dep, batch=1, context=1024)
    assert decode.memory_s == pytest.approx(2 * weights_per_device / bytes_per_s, rel=0.03)
    assert decode.compute_s == pytest.approx(2 * weights_per_device / flop_per_s, rel=0.03)
    assert decode.memory_s > 200 * decode.compute_s and decode.bound in ("memory", "overhead")
    for tokens in (512, 2048):
        prefill = prefill_time(g, dep, 1, tokens)
        assert prefill.compute_s == pytest.approx(2 * tokens * weights_per_device / flop_per_s, rel=0.05), tokens
        assert prefill.memory_s >= 0.97 * 2 * weights_per_device / bytes_per_s  # the weights, at least
        assert prefill.compute_s > prefill.memory_s, tokens


def test_claim_b_four_times_the_silicon_buys_about_twice_the_speed(graphs):
    from cost_models.steps import decode_step

    g = graphs["llama-3.1-8b"]
    one = decode_step(g, _dep("nvidia-h100-sxm", 1, 1), 1, 1024).time_s
    four = decode_step(g, _dep("nvidia-h100-sxm", 4, 4), 1, 1024).time_s
    assert 1.5 <= one / four <= 3.0


def test_claim_c_paged_kv_triples_capacity_when_mean_is_a_third_of_max(graphs):
    g = graphs["llama-3.1-70b"]
    per_token = g.kv_bytes_per_token(BF16)
    max_len = 6144
    lengths = [max_len // 3] * 100  # mean sequence a third of the maximum
    capacity = 8 * 80e9 * 0.9 - g.weight_bytes(BF16)
    paged = max_batch(capacity, per_token, lengths, max_len=max_len, paged=True)
    contiguous = max_batch(capacity, per_token, lengths, max_len=max_len, paged=False)
    assert paged / contiguous == pytest.approx(3.0, rel=0.05)


def test_claim_d_wafer_scale_wins_per_user(graphs):
    """Four CS-3 systems decode one user more than 5x faster than eight H100s. Not asserted: that the GPUs win per
    watt at full batch. The model puts the two within 3% there (4 CS-3 at 67 sequences against 8 H100 at 1,043,
    1,024 + 256 tokens each), and which leads turned on the H100's fitted mem_eff (0.9: the GPUs by 0.5%; 0.8: the
    wafers by 2.5%): a tie the model cannot call."""
    from compiler.cost.estimate import estimate

    g = graphs["llama-3.1-70b"]
    # Four CS-3 systems hold 70B in on-wafer SRAM, one pipeline stage of layers each (no NVLink-like fabric for TP).
    cs3 = estimate(g, _dep("cerebras-cs3", 4, 1, pp=4), input_len=1024, output_len=256, batch=1)
    h100_b1 = estimate(g, _dep("nvidia-h100-sxm", 8, 8), input_len=1024, output_len=256, batch=1)
    assert cs3.tokens_per_s_per_user > 5 * h100_b1.tokens_per_s_per_user


def test_memory_plan_and_not_fitting(graphs):
    from compiler.cost.estimate import estimate
    from compiler.ir.errors import BadInput

    g = graphs["llama-3.1-70b"]
    with pytest.raises(BadInput, match="needs at least 2 devices"):
        estimate(g, _dep("nvidia-h100-sxm", 1, 1), input_len=128, output_len=128, batch=1)


def test_comm_formulas():
    assert p2p_s(1e9, bw_bytes_per_s=1e9, latency_s=1e-3) == pytest.approx(1.001)
    # Ring all-reduce of n bytes over p devices moves 2(p-1)/p * n per device.
    assert allreduce_s(8e9, 8, bw_bytes_per_s=1e9, latency_s=0) == pytest.approx(2 * 7 / 8 * 8)
    assert allreduce_s(1e9, 1, bw_bytes_per_s=1e9, latency_s=1) == 0
    assert all_to_all_s(4e9, 4, bw_bytes_per_s=1e9, latency_s=0) == pytest.approx(3.0)
    assert kv_handoff_s(1e9, bw_bytes_per_s=1e9, latency_s=1e-3, layers=10,
                        layout_conversion_bytes_per_s=2e9) == pytest.approx(1.51)


def test_power_and_energy():
    assert device_power_w(tdp_w=700, idle_w=70, memory_util=0, compute_util=0) == 70
    assert device_power_w(tdp_w=700, idle_w=70, memory_util=1, compute_util=1) == 700
    assert energy_per_token_j(500, 2.0, 100) == 10


def test_speculative_decoding_tokens_per_round():
    # acceptance 0: each round yields only the target's own token
    assert expected_tokens(0.0, 4) == 1.0
    # acceptance 0.8, k=4: 1 + 0.8 + 0.8^2 + 0.8^3 + 0.8^4 = 3.3616 tokens per round
    assert expected_tokens(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)


def test_moe_expert_parallelism_splits_expert_work():
    from compiler.driver import block_graph
    from cost_models.steps import moe_expert_parallel_step

    g = block_graph("mixtral-8x7b")
    moe = next(b for b in g.phase_blocks("decode") if b.role == "moe")
    dep = _dep("nvidia-h100-sxm", 8, 1)
    point = {"B": 256, "L": 1024}
    one = moe_expert_parallel_step(g, moe, dep, point, 1)
    eight = moe_expert_parallel_step(g, moe, dep, point, 8)
    # Eight devices share the expert weights and work; two all-to-alls of 256 x 2 hidden states cost less.
    assert eight < one / 3
    tiny = block_graph("mixtral-tiny")
    tiny_moe = next(b for b in tiny.phase_blocks("decode") if b.role == "moe")
    # A tiny layer is latency-bound: splitting it only adds all-to-all hops.
    assert moe_expert_parallel_step(tiny, tiny_moe, dep, {"B": 1, "L": 8}, 8) > \
        moe_expert_parallel_step(tiny, tiny_moe, dep, {"B": 1, "L": 8}, 1)


def test_a_prompt_gets_logits_at_its_last_position_only(graphs):
    """Engines project only each prompt's last hidden state onto the vocabulary; speculative verification needs
    every position's. Llama-3.1-8B's head on 8,192 positions is 2 x 8192 x 4096 x 128,256 FLOPs, 6% of the prompt;
    on one position it is nothing, and the difference is the prefill's."""
    from cost_models.serving import memory_plan
    from cost_models.steps import Batch, step

    g = graphs["llama-3.1-8b"]
    dep = _dep("nvidia-h100-sxm", 1, 1)
    plan = memory_plan(g, dep)
    last = step(g, dep, Batch(prefill_tokens=8192), plan)
    every = step(g, dep, Batch(prefill_tokens=8192, every_logit=True), plan)
    head_flops = 2 * 8191 * 4096 * 128256
    assert every.compute_s - last.compute_s == pytest.approx(head_flops / (dep.device.peak("bf16")
                                                                          * dep.derate.compute_eff), rel=0.02)
    assert 0.04 < (every.time_s - last.time_s) / every.time_s < 0.08


def test_gpt_oss_weighs_what_its_checkpoint_stores():
    """GPT-OSS quantises only its routed experts (MXFP4); attention, router, embeddings and head stay bf16. The
    vLLM team quotes 63 GB for gpt-oss-120b (https://blog.vllm.ai/2025/08/05/gpt-oss.html, MXFP4 scales
    included); every weight at 4 bits would be 58.5 GB, 7% short."""
    from compiler.driver import block_graph
    from compiler.inputs.model_spec import checkpoint_precision, resolve_model

    g = block_graph("gpt-oss-120b")
    stored = checkpoint_precision(resolve_model("gpt-oss-120b"), Precision.of("fp4"))
    assert stored.dense == "bf16"
    assert g.weight_bytes(stored) == pytest.approx(63e9, rel=0.05)
    assert g.weight_bytes(Precision.of("fp4")) < 0.95 * 63e9
    moe = next(b for b in g.phase_blocks("decode") if b.role == "moe")
    assert moe.weight_bytes(stored) == pytest.approx(moe.expert_params * 0.5 + (moe.weight_params - moe.expert_params) * 2)


def _attention_flops_per_key(tiny_graph, step_at):
    """A prefill's compute time is a + b S + c (total keys its S queries attend to): every op but attention is
    linear in S. With queries S, S + k, S + 2k the second difference is c k^2 for causal keys (S (S + 1) / 2) and
    2 c k^2 for all S x S pairs; returned: c x peak, the FLOPs of one query-key pair over the whole model."""
    from backends.registry import device
    from compiler.ir.precision import Precision
    from cost_models.roofline import compute_peak

    h100 = device("nvidia-h100-sxm")
    peak, _ = compute_peak(h100, Precision.of("bf16").weights)
    s, k = 512, 256
    t = [step_at(h100, s + i * k) for i in range(3)]
    return (t[2] - 2 * t[1] + t[0]) / k**2 * peak


def test_a_prefill_attends_causally_as_engines_compute_it(tiny_graph):
    """Causal kernels compute the S (S + 1) / 2 query-key pairs on and below the diagonal, not the traced S x S
    ([Note: causal prefill]): two matmuls (scores, then values) of 2 FLOPs per multiply-add over head_dim, per
    head and layer, from the model's config."""
    from cost_models.derates import Derate
    from cost_models.serving import Deployment, memory_plan
    from cost_models.steps import Batch, step

    import json
    from pathlib import Path

    import compiler.inputs

    g = tiny_graph("llama-tiny")
    cfg = json.loads((Path(compiler.inputs.__file__).parent / "presets" / "llama-tiny.json").read_text())
    heads, head_dim, layers = cfg["num_attention_heads"], cfg["head_dim"], cfg["num_hidden_layers"]

    def compute_s(device, prompt):
        dep = Deployment(device, 1, Derate.ideal())
        return step(g, dep, Batch(prefill_tokens=prompt), memory_plan(g, dep)).compute_s

    per_pair = _attention_flops_per_key(tiny_graph, compute_s)
    assert per_pair == pytest.approx(2 * 2 * head_dim * heads * layers, rel=1e-6)


def test_a_chunk_attends_to_the_tokens_cached_before_it(tiny_graph):
    """A chunk of c queries after p cached tokens attends to c p + c (c + 1) / 2 keys: its compute grows by
    per-pair FLOPs x c for each token cached before it."""
    from backends.registry import device
    from compiler.ir.precision import Precision
    from cost_models.derates import Derate
    from cost_models.roofline import compute_peak
    from cost_models.serving import Deployment, memory_plan
    from cost_models.steps import Batch, step

    g = tiny_graph("llama-tiny")
    dep = Deployment(device("nvidia-h100-sxm"), 1, Derate.ideal())
    at = lambda before: step(g, dep, Batch(prefill_tokens=128, prefill_before=before),  # noqa: E731
                             memory_plan(g, dep)).compute_s
    per_pair = _attention_flops_per_key(tiny_graph, lambda d, s: step(
        g, dep, Batch(prefill_tokens=s), memory_plan(g, dep)).compute_s)
    peak, _ = compute_peak(dep.device, Precision.of("bf16").weights)
    assert (at(1000) - at(0)) * peak == pytest.approx(per_pair * 128 * 1000, rel=1e-6)


# ------------------------------------------------------------------------------------------ Neuron buckets
def test_automatic_buckets_are_nxds_powers_of_two_up_to_the_longest_sequence():
    """NxD Inference's feature guide, "Automatic Bucketing": powers of two from 128 up to the max context length
    (and that length); the 70B tutorial's launch of 2025-02-04 (--max-context-length 12288 --seq-len 12800)."""
    from cost_models.buckets import Buckets

    assert Buckets.automatic(12288).context == (128, 256, 512, 1024, 2048, 4096, 8192, 12288)
    assert Buckets.automatic(12800).token == (128, 256, 512, 1024, 2048, 4096, 8192, 12800)
    assert Buckets.automatic(4096).context == (128, 256, 512, 1024, 2048, 4096)
    assert Buckets.automatic(100).context == (100,)
    assert Buckets.fit(10000, (2048, 4096, 10240, 12288)) == 10240 and Buckets.fit(20000, (12288,)) == 20000


def test_a_prompt_on_neuron_costs_the_flops_of_its_bucket(graphs):
    """[Note: buckets]: Llama-3.3-70B (Llama-3.1-70B's shapes) on 16 Trainium2, a 10,000-token prompt in the 12,288
    program (V079's launch). Prefill at these lengths is compute-bound, so padding multiplies its time by the FLOPs
    of 12,288 tokens over those of 10,000, by hand: 2 x params x L for the matmuls and, causally, 2 x L^2 x hidden
    per layer for attention (QK^T and AV, half the square each) = 1.253; the model gives 1.228, the step's fixed
    host time and the all-reduces' latency not growing with tokens. A model that pads to nothing gives 1.0, one
    padding to the automatic bucket of a 11,501-token --max-model-len 1.15."""
    from compiler.cost.estimate import estimate
    from cost_models.buckets import Buckets

    launch = Buckets(Buckets.automatic(12288).context, Buckets.automatic(12800).token)
    padded = estimate(graphs["llama-3.1-70b"], _dep("aws-trn2", 16, 16, buckets=launch), input_len=10000,
                      output_len=1501, batch=1)
    plain = estimate(graphs["llama-3.1-70b"], _dep("aws-trn2", 16, 16), input_len=10000, output_len=1501, batch=1)
    assert padded.bound_prefill == "compute"
    matmul = LLAMA_70B_PARAMS - 2 * 128256 * 8192  # the embedding is a lookup; the head runs at the last token only
    flops = lambda n: 2 * matmul * n + 2 * n * n * 8192 * 80  # noqa: E731
    assert padded.ttft_ms / plain.ttft_ms == pytest.approx(flops(12288) / flops(10000), rel=0.03)
    assert padded.tpot_ms > plain.tpot_ms  # decoding over the 12,800 program's KV, not the ~10,750 held


def test_a_gpu_runs_no_buckets(graphs):
    """Only a platform that compiles static shapes pads: buckets given to an H100 deployment change nothing."""
    from compiler.cost.estimate import estimate
    from cost_models.buckets import Buckets

    dep = _dep("nvidia-h100-sxm", 4, 4, buckets=Buckets((12288,), (12800,)))
    assert dep.buckets is None
    assert estimate(graphs["llama-3.1-70b"], dep, input_len=10000, output_len=1501, batch=1).ttft_ms == \
        estimate(graphs["llama-3.1-70b"], _dep("nvidia-h100-sxm", 4, 4), input_len=10000, output_len=1501,
                 batch=1).ttft_ms
