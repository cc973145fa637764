"""FLOPs and bytes moved per aten op, from shapes and dtypes alone.

The rules see tensors as `TensorRef`s (shape, element size, what the tensor is)
and return an `OpCount` of symbolic expressions: shapes may hold sympy
expressions in the trace's batch and length symbols, so one count serves every
(B, S, L). Nothing here touches an fx node.

[Note: what an op is charged]
- FLOPs: ``torch.utils.flop_counter``'s formulas where it has one (mm, addmm,
  bmm, baddbmm, convolution, the SDPA variants); ``linear``, ``matmul``,
  ``_grouped_mm`` and the composite ``scaled_dot_product_attention`` by the same
  2*m*n*k arithmetic; one FLOP per output element for elementwise ops and one
  per input element for reductions.
- Bytes: every tensor input is read once and the output written once, as an
  unfused kernel would. A view (reshape, expand, transpose, slice, ...) moves
  nothing, and a kernel that reads a broadcast view reads only the underlying
  tensor (``read_elems``), so grouped-query K/V expanded to every query head are
  charged once.
- Weights are charged to ``weight_elems``, KV-cache tensors to ``kv_elems``,
  everything else to ``act_bytes``. Grouped expert matmuls receive every
  expert's weights and are flagged ``expert_weights`` so the block charges only
  the experts a step's tokens touch. An embedding lookup reads only the rows
  it gathers.
- Appending to the KV cache (``cat`` onto a cache tensor) writes the new
  entries only: the re-copy of the past that eager ``DynamicCache`` performs is
  an artefact of the reference implementation, not model cost.
- Boolean tensors are attention-mask construction, which fused attention
  kernels do in registers: they are counted as ``mask`` ops, not charged.
- Attention scores (``score`` tensors: query positions x key positions, the
  additive mask, the softmax) stay on chip in the fused attention kernels
  serving engines run (FlashAttention and its kin, sinks included for
  GPT-OSS): reading or writing one moves no bytes, though its FLOPs count,
  and the matmuls that make and use them are ``attention`` ops, as a fused
  kernel's are (`cost_models.roofline` scales attention by the keys a query sees).
  Models that trace attention unfused (GPT-OSS's eager attention with sinks)
  would otherwise move B x heads x S^2 elements per layer several times over:
  114 GB per layer for an 8,192-token GPT-OSS-120B prompt, a 580 ms step on an
  H200 where serving sweeps measure under 300 ms to the first token
  (../shared/reference/serving_sweeps.csv).
- Multi-head latent attention decodes in the absorbed form engines run
  (``mla_decode_attention``, [Note: absorbed MLA] in `compiler.trace.absorbed_mla`):
  multi-query attention whose keys are the cached latents and whose values are
  their first ``kv_lora_rank`` columns, so the latent cache is read once.
  Joining the cache's two tensors (latent and RoPE key) into that one entry is
  a ``cat`` of cache tensors: it writes no new entry.
- An op without a rule is reported by name (``kind="unaccounted"``), never
  counted as zero silently.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Sequence

Expr = Any  # an int or a sympy expression


@dataclass(frozen=True, slots=True)
class TensorRef:
    """What a rule knows about one tensor operand."""

    shape: tuple[Expr, ...]
    itemsize: int
    category: str = "act"  # "weight" | "kv" | "act" | "score" (see [Note: what an op is charged])
    read_elems: Expr = None  # elements a kernel reads; the underlying tensor's size for a broadcast view
    expert: bool = False  # a routed-expert weight

    @property
    def numel(self) -> Expr:
        return math.prod(self.shape)

    @property
    def elems_read(self) -> Expr:
        return self.numel if self.read_elems is None else self.read_elems


@dataclass(frozen=True, slots=True)
class OpCount:
    kind: str
    flops: Expr = 0
    weight_elems: Expr = 0
    kv_elems: Expr = 0
    act_bytes: Expr = 0
    expert_weights: bool = False


LAYOUT_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "expand", "expand_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "alias", "detach",
    "contiguous", "clone", "unflatten", "flatten", "view_as", "as_strided", "lift_fresh_copy",
    "_assert_tensor_metadata", "_assert_scalar", "sym_size", "sym_numel", "sym_stride", "getitem",
    "dropout", "movedim", "narrow", "_local_scalar_dense", "sym_constrain_range_for_size",
})
ELEMENTWISE_OPS = frozenset({
    "add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp",
    "log", "silu", "sigmoid", "tanh", "gelu", "relu", "cos", "sin", "clamp", "clamp_min", "clamp_max",
    "minimum", "maximum", "where", "masked_fill", "abs", "reciprocal", "floor_divide", "remainder",
    "bitwise_and", "bitwise_or", "bitwise_not", "logical_not", "rsub", "erf", "square", "sign",
    "_softmax", "softmax", "log_softmax", "floor", "ceil", "round", "_log_softmax", "fmod", "type_as",
    "to", "_to_copy", "_to_dtype",
})
#: Fused normalisations (LayerNorm in GPT-NeoX and GPT-2 style models, fused RMSNorm): ~8 FLOPs per element
#: (mean, variance, normalise, scale, shift), reading the input and the scale/shift weights once.
NORM_OPS = frozenset({"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm"})
NORM_FLOPS_PER_ELEMENT = 8
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "std", "norm", "logsumexp", "prod", "all", "any"})
DATA_OPS = frozenset({
    "embedding", "index", "index_put", "index_select", "gather", "scatter", "scatter_add", "index_add", "sort", "argsort", "topk", "histc", "bincount", "cumsum",
    "arange", "zeros", "ones", "full", "empty", "new_ones", "new_zeros", "new_empty", "new_full",
    "empty_like", "zeros_like", "ones_like", "full_like", "scalar_tensor", "copy", "fill", "argmax", "argmin", "one_hot", "repeat", "repeat_interleave", "tril", "triu", "diff",
    "stack", "pad", "constant_pad_nd",
})
MATMUL_OPS = frozenset({"linear", "mm", "addmm", "bmm", "baddbmm", "matmul", "_grouped_mm", "einsum", "convolution"})
ATTENTION_OPS = frozenset({
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
})


def op_name(target: Any) -> str:
    """``aten.linear.default`` -> ``linear``; ``operator.getitem`` -> ``getitem``."""
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target))


def is_score(shape: Sequence[Expr]) -> bool:
    """Whether a tensor of `shape` is attention scores (or their mask): rank 3 or more, the last dimension a
    symbolic key length, the one before it a symbolic query length or 1 (a decode step's one query)."""
    return len(shape) >= 3 and not isinstance(shape[-1], int) and (shape[-2] == 1 or not isinstance(shape[-2], int))


def _read_bytes(t: TensorRef) -> tuple[Expr, Expr, Expr]:
    """(weight_elems, kv_elems, act_bytes) of reading `t` once."""
    if t.category == "weight":
        return t.elems_read, 0, 0
    if t.category == "kv":
        return 0, t.elems_read, 0
    if t.category == "score":
        return 0, 0, 0
    return 0, 0, t.elems_read * t.itemsize


def _io(inputs: Sequence[TensorRef], outputs: Sequence[TensorRef]) -> tuple[Expr, Expr, Expr]:
    w = kv = act = 0
    for t in inputs:
        dw, dkv, dact = _read_bytes(t)
        w, kv, act = w + dw, kv + dkv, act + dact
    for t in outputs:
        if t.category != "score":
            act = act + t.numel * t.itemsize
    return w, kv, act


def _matmul_flops(name: str, inputs: Sequence[TensorRef], outputs: Sequence[TensorRef], args: Sequence[Any]) -> Expr:
    from torch.utils.flop_counter import flop_registry
    import torch

    aten = torch.ops.aten
    registered = {"mm": aten.mm, "addmm": aten.addmm, "bmm": aten.bmm, "baddbmm": aten.baddbmm,
                  "convolution": aten.convolution}
    if name in registered:
        return flop_registry[registered[name]](*args, out_val=outputs[0].shape)
    a, b = inputs[0], inputs[1]
    if name == "linear":  # weight is (out, in)
        return 2 * math.prod(a.shape[:-1]) * a.shape[-1] * b.shape[0]
    if name == "_grouped_mm":  # (tokens, k) x (experts, k, n): each token row meets one expert
        return 2 * a.shape[0] * a.shape[-1] * b.shape[-1]
    if name == "matmul":  # batched, broadcasting
        out = outputs[0].shape
        return 2 * math.prod(out) * a.shape[-1]
    raise KeyError(name)


def _attention_flops(name: str, inputs: Sequence[TensorRef]) -> Expr:
    from torch.utils.flop_counter import sdpa_flop_count

    q, k, v = (t.shape for t in inputs[:3])
    if q[1] == k[1] and q[-1] == v[-1]:
        return sdpa_flop_count(q, k, v)
    b, h, sq, dq = q  # grouped heads or MLA's unequal head dims: same arithmetic, per dimension
    sk, dv = k[-2], v[-1]
    return 2 * b * h * sq * sk * dq + 2 * b * h * sq * sk * dv


def count_op(name: str, inputs: Sequence[TensorRef], outputs: Sequence[TensorRef], args: Sequence[Any] = (),
             kv_append: bool = False, is_mask: bool = False) -> OpCount:
    """Charge one op. See [Note: what an op is charged]."""
    if name.endswith("_") and not name.startswith("_") and name[:-1] in ELEMENTWISE_OPS | DATA_OPS:
        name = name[:-1]  # in-place variants cost what their functional form does
    if name in LAYOUT_OPS:
        return OpCount("layout")
    if is_mask:
        return OpCount("mask")
    if kv_append:  # cat onto a cache tensor: only the new entries are written
        new = sum(t.numel for t in inputs if t.category != "kv")
        return OpCount("data", kv_elems=new)
    if name in MATMUL_OPS:
        w, kv, act = _io(inputs, outputs)
        expert = any(t.expert and t.category == "weight" for t in inputs)
        scores = any(t.category == "score" for t in (*inputs, *outputs))  # Q K^T or P V of unfused attention
        return OpCount("attention" if scores else "matmul", _matmul_flops(name, inputs, outputs, args), w, kv, act,
                       expert)
    if name == "mla_decode_attention":  # keys and values are one latent cache, read once: [Note: absorbed MLA]
        w, kv, act = _io(inputs[:2], outputs[:1])
        (b, h, sq, dk), sk, dv = inputs[0].shape, inputs[1].shape[-2], outputs[0].shape[-1]
        return OpCount("attention", 2 * b * h * sq * sk * dk + 2 * b * h * sq * sk * dv, w, kv, act)
    if name in ATTENTION_OPS:
        w, kv, act = _io(inputs[:3], outputs[:1])
        return OpCount("attention", _attention_flops(name, inputs), w, kv, act)
    if name in ELEMENTWISE_OPS or name == "cat":
        w, kv, act = _io(inputs, outputs)
        flops = 0 if name in {"to", "_to_copy", "_to_dtype", "type_as", "cat"} else sum(t.numel for t in outputs)
        return OpCount("elementwise", flops, w, kv, act)
    if name in NORM_OPS:
        w, kv, act = _io(inputs, outputs[:1])  # the extra outputs (mean, rstd) are tiny and rarely kept
        return OpCount("elementwise", NORM_FLOPS_PER_ELEMENT * outputs[0].numel, w, kv, act)
    if name in REDUCTION_OPS:
        w, kv, act = _io(inputs, outputs)
        return OpCount("reduction", sum(t.numel for t in inputs), w, kv, act)
    if name in DATA_OPS:
        if name == "embedding" or (name == "index" and inputs and inputs[0].category == "weight"):
            rows = sum(t.numel for t in outputs)  # a gather reads only the rows it returns
            return OpCount("data", 0, rows, 0, sum(t.numel * t.itemsize for t in outputs))
        w, kv, act = _io(inputs, outputs)
        return OpCount("data", 0, w, kv, act)
    return OpCount("unaccounted")
