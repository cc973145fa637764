"""Generate one readable Python stage program per pool x pipeline stage x tensor-parallel rank.

Before: a model's Hugging Face config (a dict), a stage's block list (``embed``,
``L{i}.attn``, ``L{i}.ffn`` / ``L{i}.moe``, ``head``), its tp and the rank.
After: `StageProgram`: the program's source text (a module defining one function
per block, plus ``BLOCKS``) and `WeightRef`s saying which slice of which Hugging
Face tensor each weight name in the program is. `compiler.emit.weights` cuts
the shards; `compiler.runtime` executes the text after its manifest hash checks.

[Note: stage programs are generated from block templates]
The blocks the cost model charges (`compiler.trace.ownership`) are emitted as
code from one template per block role, for the decoder family the runtime
supports (``llama``, ``mistral``, ``mixtral``: RMSNorm, RoPE, grouped-query
attention, SwiGLU MLP or top-k routed SwiGLU experts). A template works on
flat tokens (N, hidden), so one call serves a prefill prompt and a ragged
decode batch; attention's cache access is the ``attend`` callable the caller
passes (the runtime's paged KV cache, or dense causal attention for the ONNX
export). The traced split (`compiler.trace.stage_split`) stays the reference
for what a block is; these programs are checked against Hugging Face
``generate`` (tests/runtime). Other families raise `UnsupportedModel` naming
what is missing; their plans still compile, without runnable stages.

[Note: tensor-parallel residual]
A tensor-parallel rank holds heads [q0, q1) / KV heads [k0, k1) of attention
and columns [f0, f1) of the FFN (of every expert), so its ``o_proj`` /
``down_proj`` output is a partial sum. Rank 0's program adds the residual and
the other ranks' programs do not; the runtime all-reduces (sums) the block
outputs, which gives ``x + sum_r partial_r`` exactly once: the unsplit block up
to the order of the float sum. (Cleaner than summing ``x + partial_r`` on every
rank and subtracting ``(tp - 1) x``, which rounds twice.) ``embed`` is
replicated on every rank, so every rank enters a block with the same x;
``head`` runs on rank 0 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.ir.errors import UnsupportedModel

SUPPORTED_TYPES = ("llama", "mistral", "mixtral")

_PRELUDE = '''import torch
import torch.nn.functional as F


def rms_norm(x, weight):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return weight * h.to(x.dtype)


def rope_tables(w, positions, dtype):
    """cos and sin of each token's position, (N, head_dim)."""
    freqs = positions.to(torch.float32)[:, None] * w["rope.inv_freq"][None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * ROPE_SCALING).to(dtype), (emb.sin() * ROPE_SCALING).to(dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def swiglu(h, gate, up, down):
    return F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down)
'''


@dataclass(frozen=True, slots=True)
class WeightRef:
    """Shard tensor = ``source`` (a Hugging Face state-dict key) sliced to [lo, hi) along ``dim`` (None: whole)."""

    source: str
    dim: int | None = None
    lo: int = 0
    hi: int = 0


@dataclass(frozen=True, slots=True)
class Shape:
    """The model dimensions a template needs, read from the config once."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    experts: int
    top_k: int
    eps: float
    layers: int


@dataclass(frozen=True, slots=True)
class RankSlice:
    """A tp rank's share: [lo, hi) of query heads, KV heads and FFN columns."""

    q_heads: tuple[int, int]
    kv_heads: tuple[int, int]
    ffn: tuple[int, int]


@dataclass(frozen=True, slots=True)
class StageProgram:
    source: str
    weights: tuple[tuple[str, WeightRef], ...]
    blocks: tuple[str, ...]
    slice: RankSlice


def shape_of(config: dict[str, Any]) -> Shape:
    """The dimensions of a supported config; `UnsupportedModel` names what is missing."""
    kind = config.get("model_type")
    if kind not in SUPPORTED_TYPES:
        raise UnsupportedModel(f"model_type {kind!r} has no stage-program template yet (supported: "
                               f"{', '.join(SUPPORTED_TYPES)}); the plan compiles but cannot run")
    for flag in ("attention_bias", "mlp_bias"):
        if config.get(flag):
            raise UnsupportedModel(f"config {flag}=true: biased projections have no stage-program template yet")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"config hidden_act={config.get('hidden_act')!r}: only silu is templated")
    if config.get("sliding_window"):
        raise UnsupportedModel("config sliding_window is set: sliding-window attention has no template yet")
    heads = int(config["num_attention_heads"])
    return Shape(hidden=int(config["hidden_size"]), heads=heads,
                 kv_heads=int(config.get("num_key_value_heads") or heads),
                 head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
                 intermediate=int(config["intermediate_size"]), experts=int(config.get("num_local_experts") or 0),
                 top_k=int(config.get("num_experts_per_tok") or 0), eps=float(config.get("rms_norm_eps", 1e-6)),
                 layers=int(config["num_hidden_layers"]))


def rank_slice(shape: Shape, tp: int, rank: int) -> RankSlice:
    """Even split of heads and FFN columns over `tp` ranks; refuses splits that do not divide."""
    for what, n in (("num_key_value_heads", shape.kv_heads), ("num_attention_heads", shape.heads),
                    ("intermediate_size", shape.intermediate)):
        if n % tp:
            raise UnsupportedModel(f"tp={tp} does not divide {what}={n}; replicated KV heads and uneven "
                                   f"splits have no stage program yet")

    def part(n: int) -> tuple[int, int]:
        return rank * n // tp, (rank + 1) * n // tp

    return RankSlice(part(shape.heads), part(shape.kv_heads), part(shape.intermediate))


def stage_program(config: dict[str, Any], blocks: list[str], *, tp: int, rank: int, title: str,
                  rope_scaling: float = 1.0) -> StageProgram:
    """Source and weight slices of one rank of one stage. `blocks` are block names without the phase prefix."""
    shape = shape_of(config)
    sl = rank_slice(shape, tp, rank)
    kept = [b for b in blocks if b != "head" or rank == 0]
    body: list[str] = []
    refs: dict[str, WeightRef] = {}
    for block in kept:
        text, weights = _block(block, shape, sl, rank)
        body.append(text)
        refs.update(weights)
    if any(b.endswith(".attn") for b in kept):
        refs["rope.inv_freq"] = WeightRef("rope.inv_freq")
    header = _header(kept, shape, sl, tp, rank, title, rope_scaling)
    table = "BLOCKS = {\n" + "".join(f"    {b!r}: {_fn(b)},\n" for b in kept) + "}\n"
    source = header + _PRELUDE + "\n\n" + "\n\n".join(body) + "\n\n" + table
    return StageProgram(source, tuple(sorted(refs.items())), tuple(kept), sl)


def _fn(block: str) -> str:
    return block.replace(".", "_")


def _header(blocks, shape: Shape, sl: RankSlice, tp: int, rank: int, title: str, scaling: float) -> str:
    return (f'"""Stage program {title}: tensor-parallel rank {rank} of {tp}. Generated by gimletc; do not edit\n'
            f'(plan/manifest.json holds its sha256, checked before it runs).\n\n'
            f'Blocks: {", ".join(blocks) or "none"}.\n'
            f'Query heads [{sl.q_heads[0]}, {sl.q_heads[1]}) of {shape.heads}, KV heads [{sl.kv_heads[0]}, '
            f'{sl.kv_heads[1]}) of {shape.kv_heads}, FFN columns [{sl.ffn[0]}, {sl.ffn[1]}) of {shape.intermediate}.\n'
            f'Each block maps flat tokens x (N, {shape.hidden}) to its output. `w` maps the weight names used\n'
            f'below to tensors of this rank\'s safetensors shard. Attention calls attend(layer, q, k, v), given by\n'
            f'the caller: the runtime\'s paged KV cache, or dense causal attention for the ONNX export.\n'
            f'Rank 0 adds the residual, other ranks return partial sums (see [Note: tensor-parallel residual]\n'
            f'in compiler/emit/stage_programs.py).\n"""\n'
            f'EPS = {shape.eps!r}\nHEAD_DIM = {shape.head_dim}\nROPE_SCALING = {scaling!r}\n'
            f'TP_RANK, TP = {rank}, {tp}\n\n')


def _residual(rank: int) -> str:
    return "x + " if rank == 0 else ""


def _block(block: str, shape: Shape, sl: RankSlice, rank: int) -> tuple[str, dict[str, WeightRef]]:
    if block == "embed":
        return ('def embed(w, ids):\n    return F.embedding(ids, w["embed_tokens"])\n',
                {"embed_tokens": WeightRef("model.embed_tokens.weight")})
    if block == "head":
        return ('def head(w, x):\n    return F.linear(rms_norm(x, w["final_norm"]), w["lm_head"])\n',
                {"final_norm": WeightRef("model.norm.weight"), "lm_head": WeightRef("lm_head.weight")})
    layer, kind = block[1:].split(".")
    i = int(layer)
    if kind == "attn":
        return _attn(i, shape, sl, rank)
    if kind == "moe":
        return _moe(i, shape, sl, rank)
    return _ffn(i, sl, rank)


def _attn(i: int, shape: Shape, sl: RankSlice, rank: int) -> tuple[str, dict[str, WeightRef]]:
    nq, nkv, d = sl.q_heads[1] - sl.q_heads[0], sl.kv_heads[1] - sl.kv_heads[0], shape.head_dim
    p = f"model.layers.{i}.self_attn."
    text = (f'def L{i}_attn(w, x, cos, sin, attend):\n'
            f'    h = rms_norm(x, w["L{i}.attn_norm"])\n'
            f'    q = F.linear(h, w["L{i}.q_proj"]).view(-1, {nq}, HEAD_DIM)\n'
            f'    k = F.linear(h, w["L{i}.k_proj"]).view(-1, {nkv}, HEAD_DIM)\n'
            f'    v = F.linear(h, w["L{i}.v_proj"]).view(-1, {nkv}, HEAD_DIM)\n'
            f'    o = attend({i}, rotate(q, cos, sin), rotate(k, cos, sin), v)\n'
            f'    return {_residual(rank)}F.linear(o.reshape(-1, {nq * d}), w["L{i}.o_proj"])\n')
    q0, q1 = sl.q_heads[0] * d, sl.q_heads[1] * d
    k0, k1 = sl.kv_heads[0] * d, sl.kv_heads[1] * d
    return text, {f"L{i}.attn_norm": WeightRef(f"model.layers.{i}.input_layernorm.weight"),
                  f"L{i}.q_proj": WeightRef(p + "q_proj.weight", 0, q0, q1),
                  f"L{i}.k_proj": WeightRef(p + "k_proj.weight", 0, k0, k1),
                  f"L{i}.v_proj": WeightRef(p + "v_proj.weight", 0, k0, k1),
                  f"L{i}.o_proj": WeightRef(p + "o_proj.weight", 1, q0, q1)}


def _ffn(i: int, sl: RankSlice, rank: int) -> tuple[str, dict[str, WeightRef]]:
    p = f"model.layers.{i}.mlp."
    f0, f1 = sl.ffn
    text = (f'def L{i}_ffn(w, x):\n'
            f'    h = rms_norm(x, w["L{i}.ffn_norm"])\n'
            f'    return {_residual(rank)}swiglu(h, w["L{i}.gate_proj"], w["L{i}.up_proj"], w["L{i}.down_proj"])\n')
    return text, {f"L{i}.ffn_norm": WeightRef(f"model.layers.{i}.post_attention_layernorm.weight"),
                  f"L{i}.gate_proj": WeightRef(p + "gate_proj.weight", 0, f0, f1),
                  f"L{i}.up_proj": WeightRef(p + "up_proj.weight", 0, f0, f1),
                  f"L{i}.down_proj": WeightRef(p + "down_proj.weight", 1, f0, f1)}


def _moe(i: int, shape: Shape, sl: RankSlice, rank: int) -> tuple[str, dict[str, WeightRef]]:
    """Routed experts, every expert evaluated densely with weight 0 for tokens not routed to it.

    Adding an exact zero changes no sum, so each token's output is Hugging Face's
    (experts summed in index order); the cost is E / top-k times the routed work,
    which emulation on the host accepts in exchange for a graph without data-dependent
    control flow (it exports to ONNX as is).
    """
    p = f"model.layers.{i}.mlp."
    f0, f1 = sl.ffn
    text = (f'def L{i}_moe(w, x):\n'
            f'    h = rms_norm(x, w["L{i}.ffn_norm"])\n'
            f'    probs = torch.softmax(F.linear(h, w["L{i}.router"]).float(), dim=-1)\n'
            f'    top_w, top_i = torch.topk(probs, {shape.top_k}, dim=-1)\n'
            f'    top_w = top_w / top_w.sum(dim=-1, keepdim=True)\n'
            f'    out = torch.zeros_like(h)\n'
            f'    for e in range({shape.experts}):\n'
            f'        share = (top_w * (top_i == e)).sum(dim=-1, keepdim=True).to(h.dtype)  # 0 unless routed to e\n'
            f'        y = swiglu(h, w["L{i}.experts.gate"][e], w["L{i}.experts.up"][e], w["L{i}.experts.down"][e])\n'
            f'        out = out + y * share\n'
            f'    return {_residual(rank)}out\n')
    n = shape.intermediate
    return text, {f"L{i}.ffn_norm": WeightRef(f"model.layers.{i}.post_attention_layernorm.weight"),
                  f"L{i}.router": WeightRef(p + "gate.weight"),
                  f"L{i}.experts.gate": WeightRef(p + "experts.gate_up_proj", 1, f0, f1),
                  f"L{i}.experts.up": WeightRef(p + "experts.gate_up_proj", 1, n + f0, n + f1),
                  f"L{i}.experts.down": WeightRef(p + "experts.down_proj", 2, f0, f1)}
