"""Roofline time of a block on a device: compute- or memory-bound, per op, with overheads.

An op takes ``max(flops / achievable FLOP/s, bytes / achievable bytes/s)``
(the compute side includes converting weights stored narrower than the
matmul computes, [Note: weight-only dequantisation]);
a block takes the sum of its ops plus a fixed per-kernel-group overhead.
Achievable = datasheet peak (``DeviceSpec``) x efficiency (`Derate`), kept
apart so a peak is never a fitted number.

Memory tiers: weights are read from the tier they were placed in. A
`TierSplit` says what fraction of a block's weight bytes sits in each tier
(SRAM first, then DRAM/external); KV and activations use the fastest tier
with room, which the serving model decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from compiler.ir.block_graph import Block, Work, expert_touch_fraction
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.precision import Precision, dtype_bytes
from cost_models.derates import Derate

#: Matmul dtype actually used when the weight dtype has no native throughput: weight-only quantisation, the weights
#: stored narrow and computed with 16-bit activations (W4A16, W8A16). Hopper engines run GPT-OSS's MXFP4 experts so:
#: TensorRT-LLM's Triton MoE backend with BF16 activations on H200 (its GPT-OSS deployment guide's MoE support
#: matrix, https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html), vLLM
#: the Triton ``matmul_ogs`` kernel on H100 and H200 (https://blog.vllm.ai/2025/08/05/gpt-oss.html); so do AWQ and
#: GPTQ W4A16 checkpoints, and W8A16 kernels for fp8 on A100. A device with neither fp4 nor 16-bit rates computes fp4
#: weights at fp8.
COMPUTE_FALLBACK = {"fp4": ("fp4", "bf16", "fp16", "fp8", "fp32"), "fp8": ("fp8", "bf16", "fp16", "fp32"),
                    "bf16": ("bf16", "fp16", "fp32"), "fp16": ("fp16", "bf16", "fp32"), "fp32": ("fp32", "bf16")}


#: [Note: weight-only dequantisation] A matmul whose weights are stored narrower than it computes (W4A16: the
#: `COMPUTE_FALLBACK` above, GPT-OSS's MXFP4 experts on Hopper) converts every weight it reads to the compute dtype
#: inside the kernel, on the SMs' vector (CUDA-core) units, before the tensor cores see it: unpack the 4-bit field,
#: convert e2m1 to bf16, apply the 32-element block's e8m0 scale, pack the pair into the MMA operand. That is
#: vector work in proportion to the weights read, `DEQUANT_OPS_PER_WEIGHT` operations per element at the device's
#: FP32 vector peak times `Derate.vector_eff`, and it overlaps the weight stream (it adds to the op's compute
#: side, not its memory side). It is why the H100 and H200, with the same SMs and clocks (`HOPPER_TFLOPS` in
#: backends/nvidia.py) and 3.35 against 4.8 TB/s, decode GPT-OSS-120B under vLLM at nearly the same speed: the 39
#: configurations measured on both (../shared/reference/serving_sweeps.csv) run a median 1.041x slower on the H100,
#: where streaming the weights from HBM would make it up to 1.43x (the serving model at one set of efficiencies for
#: both: 1.128x without this term, 1.024x with it; `tools/device_pairs.py`). The count of 4 per element is an
#: assumption (the four steps above, one operation each); 2 would leave the weight stream binding on both GPUs, 8
#: would make GPT-OSS decode 20-40% slower than measured. It is charged once per weight a step reads (a decode
#: step's tokens fit one tile of the matmul); a prefill GEMM that converts its weights again for each tile of
#: tokens pays more, which is not modelled. A stored dtype not listed, or a device that publishes no FP32 rate, is
#: not charged.
DEQUANT_OPS_PER_WEIGHT: dict[str, float] = {"fp4": 4.0}


def dequant_s_per_byte(device: DeviceSpec, stored: str, computed: str, derate: Derate) -> float:
    """Vector time per stored weight byte that converting `stored` weights to `computed` costs on `device` (0 where
    they match or the conversion is not modelled); see [Note: weight-only dequantisation]."""
    ops = DEQUANT_OPS_PER_WEIGHT.get(stored, 0.0)
    vector = device.peak("fp32")
    if stored == computed or not ops or not vector:
        return 0.0
    return ops / dtype_bytes(stored) / (vector * derate.vector_eff)


def compute_peak(device: DeviceSpec, dtype: str) -> tuple[float, str]:
    """(dense peak FLOP/s, dtype it runs at) for matmuls whose weights are `dtype` (or that compute at `dtype`)."""
    for candidate in COMPUTE_FALLBACK.get(dtype, (dtype,)):
        peak = device.peak(candidate)
        if peak:
            return peak, candidate
    raise ValueError(f"{device.id} publishes no throughput for {dtype} or a wider dtype")


@dataclass(frozen=True, slots=True)
class TierSplit:
    """Fraction of some bytes (weights or KV) in each memory tier, by tier name (sums to 1)."""

    fractions: tuple[tuple[str, float], ...]

    def read_s(self, nbytes: float, device: DeviceSpec, derate: Derate) -> float:
        total = 0.0
        for name, frac in self.fractions:
            tier = device.tier(name)
            total += nbytes * frac / (tier.bw_bytes_per_s * derate.mem_eff)
        return total


def fastest_tier(device: DeviceSpec) -> TierSplit:
    return TierSplit(((device.memory[0].name, 1.0),))


@dataclass(frozen=True, slots=True)
class BlockTime:
    """Time of one block step on one shard, and what bounds it."""

    time_s: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def block_time(block: Block, point: dict[str, float], device: DeviceSpec, *, precision: Precision,
               derate: Derate, shards: int = 1, tiers: TierSplit | None = None,
               kv_tiers: TierSplit | None = None, kv_shards: float | None = None) -> BlockTime:
    """Time of one step of `block` at `point` split evenly over `shards` devices (tensor parallel); the KV over
    `kv_shards` of them (default `shards`; fewer where they replicate KV heads, [Note: replicated KV heads]).

    Each op is bound by compute or memory on its own; the block's compute and
    memory totals are reported to say which resource dominates. `tiers` and
    `kv_tiers` say where weights and KV live (default: the fastest tier).
    """
    return step_block_time(((block, point),), device, precision=precision, derate=derate, shards=shards,
                           tiers=tiers, kv_tiers=kv_tiers, kv_shards=kv_shards)


#: [Note: block work memo] Costing every pool option evaluates the same block at the same point (batch,
#: lengths) on every device type, parallelism and batch size: the work of its ops (polynomials in B, S, L)
#: depends on none of them. `ops_work` keeps the last `WORK_MEMO` results, keyed by the block's identity (held
#: in the entry, so a freed block's id reused by another never matches), the point, the precision and the
#: share of experts touched.
WORK_MEMO = 20_000
_work_memo: dict[tuple, tuple] = {}


def ops_work(block: Block, point: dict[str, float], precision: Precision,
             touched: float) -> tuple[tuple[tuple[str, str, bool], Work], ...]:
    """Each op of `block` at `point` as ((op, kind, expert weights), its `Work`), memoised ([Note: block work
    memo])."""
    key = (id(block), tuple(sorted(point.items())), precision, touched)
    hit = _work_memo.get(key)
    if hit is not None and hit[0] is block:
        return hit[1]
    out = tuple(((op.op, op.kind, op.expert_weights), op.work(precision, touched, **point)) for op in block.ops)
    if len(_work_memo) >= WORK_MEMO:
        _work_memo.clear()
    _work_memo[key] = (block, out)
    return out


def keys_per_query(queries: float, before: float = 0.0, window: int | None = None) -> float:
    """The mean keys a prefill query attends to: `queries` new tokens after `before` cached ones, each seeing
    the keys up to its own position (at most `window` of them in a sliding-window block).

    [Note: causal prefill] The traced prefill attention is `sdpa_flop_count`'s,
    every one of S queries against all S keys: the polynomials count S x S
    pairs. Causal kernels (FlashAttention, vLLM's and SGLang's prefill
    kernels, PyTorch's with ``is_causal``) skip the pairs above the diagonal, so
    query j (1-based) costs j keys, min(j, window) in a sliding window: the mean
    over a prompt is (S + 1) / 2, half the traced count. The roofline scales a
    prefill block's attention FLOPs by this mean over S; a chunk after `before`
    cached tokens sees those too. At 1,024 tokens attention is 38% of
    llama-mini's prefill FLOPs counted S x S (the model vLLM serves in
    ``calibrate --engine``), so the causal count takes about a fifth off.

    >>> keys_per_query(4), keys_per_query(2, before=2), keys_per_query(4, window=2)
    (2.5, 3.5, 1.75)
    """
    if queries <= 0:
        return 0.0
    return (_keys_up_to(before + queries, window) - _keys_up_to(before, window)) / queries


def _keys_up_to(n: float, window: int | None) -> float:
    """Keys the first `n` queries attend to together: sum over j = 1..n of min(j, window)."""
    if not window or n <= window:
        return n * (n + 1) / 2
    return window * (window + 1) / 2 + (n - window) * window


def step_block_time(parts: Sequence[tuple[Block, dict[str, float]]], device: DeviceSpec, *, precision: Precision,
                    derate: Derate, shards: int = 1, tiers: TierSplit | None = None,
                    kv_tiers: TierSplit | None = None, prefill_before: Sequence[float] | None = None,
                    kv_shards: float | None = None) -> BlockTime:
    """One engine step that runs several batches through the same block, e.g. a colocated step's decodes
    (a decode block at (B, L)) and prefill chunk (its prefill twin at (B, S)).

    [Note: one weight read per step] The batches share every kernel: an op's
    FLOPs, KV and activation bytes add up, but its weights are read once
    (routed experts: the fraction all the step's tokens touch together). Each
    merged op is then bound by compute or memory on its own, as in `block_time`.
    `kv_shards` as in `block_time`. A prefill block's attention FLOPs are those of its queries' causal keys
    ([Note: causal prefill]); `prefill_before` gives, per part, the tokens already cached before its S queries
    (a later chunk of a prompt, draft tokens after a context; default 0: a whole prompt).
    """
    peak, at = compute_peak(device, precision.compute or precision.weights)
    tiers = tiers or fastest_tier(device)
    kv_tiers = kv_tiers or fastest_tier(device)
    tokens = sum(block.tokens(**point) for block, point in parts)
    head = parts[0][0]
    touched = expert_touch_fraction(tokens, head.experts, head.experts_per_token) if head.experts else 1.0
    merged: dict[tuple[str, str, bool], list[float]] = {}
    for i, (block, point) in enumerate(parts):
        scale = 1.0
        if block.phase == "prefill" and point.get("S", 0) > 0:
            queries = point["S"]
            scale = keys_per_query(queries, prefill_before[i] if prefill_before else 0.0, block.window_tokens) / queries
        seen = block.at(point)  # a sliding window caps what a decode step attends to
        for key, w in ops_work(block, seen, precision, touched):
            m = merged.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            m[0] += w.flops * (scale if key[1] == "attention" else 1.0)
            m[1] = max(m[1], w.weight_bytes)  # read once per step, however many batches use it
            m[2] += w.kv_bytes
            m[3] += w.act_bytes
    fast_bw = device.memory[0].bw_bytes_per_s * derate.mem_eff
    stored = {True: precision.weights, False: precision.dense or precision.weights}  # by expert weights or not
    dequant = {expert: dequant_s_per_byte(device, dtype, at, derate) for expert, dtype in stored.items()}
    total = comp_total = mem_total = 0.0
    for (_op, kind, expert), (flops, weights, kv, act) in merged.items():
        heavy = kind in ("matmul", "attention")
        if not heavy:  # serving engines fuse norms, RoPE and activations into neighbouring kernels
            act *= derate.elementwise_traffic
        eff = derate.matmul_eff(at) if heavy else derate.vector_eff
        comp = flops / shards / (peak * eff) if flops else 0.0
        if heavy and weights:  # [Note: weight-only dequantisation]
            comp += weights / shards * dequant[expert]
        mem = (tiers.read_s(weights / shards, device, derate)
               + kv_tiers.read_s(kv / (kv_shards or shards), device, derate) + act / shards / fast_bw)
        comp_total += comp
        mem_total += mem
        total += max(comp, mem)
    calls = max(block.dispatches or sum(op.count for op in block.ops) for block, _ in parts)  # views dispatch too
    overhead = derate.block_overhead_s + derate.op_overhead_s * calls
    return BlockTime(total + overhead, comp_total, mem_total, overhead)
