"""Generate one readable Python stage program per pool x pipeline stage x tensor-parallel rank.

Before: a model's Hugging Face config (a dict), a stage's block list (``embed``,
``L{i}.attn``, ``L{i}.ffn`` / ``L{i}.moe``, ``head``), its tp and the rank.
After: `StageProgram`: the program's source text (a module defining one function
per block, plus ``BLOCKS``) and `WeightRef`s saying which slice of which Hugging
Face tensor each weight name in the program is. `compiler.emit.weights` cuts
the shards; `compiler.runtime` executes the text after its manifest hash checks.

[Note: stage programs are generated from block templates]
The blocks the cost model charges (`compiler.trace.ownership`) are emitted as
code from one template per block role. Two kinds of template:

- written out (``llama``, ``mistral``, ``mixtral``: RMSNorm, RoPE, grouped-query
  attention, SwiGLU MLP or top-k routed SwiGLU experts): plain torch, tensor
  parallel, exported to ONNX;
- Hugging Face's own modules (`HF_RECIPES`: ``qwen2``, ``qwen3``, ``qwen3_moe``,
  ``phi3``, ``deepseek_v3``, ``gpt_oss``, ``gemma2``, ``gpt_neox``, ``gpt2``):
  the program says which submodules a block calls, in which order, with which
  residuals (the family's `Recipe`), and `compiler.runtime.hf_modules` runs
  transformers' code for each (q/k norms, biases, MLA, routers, sinks,
  soft-capping, partial RoPE). One tp rank, no ONNX.

A template works on flat tokens (N, hidden), so one call serves a prefill
prompt and a ragged decode batch; attention's cache access is the ``attend``
callable the caller passes (the runtime's paged KV cache, or dense causal
attention for the ONNX export). The traced split (`compiler.trace.stage_split`)
stays the reference for what a block is; these programs are checked against
Hugging Face ``generate`` (tests/runtime/test_architectures.py). Other families,
and shapes a template cannot run, raise `UnsupportedModel` naming what is
missing; their plans still compile, with a warning and without runnable stages.

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

import functools
import json
from dataclasses import dataclass
from typing import Any

from compiler.ir.errors import UnsupportedModel

TEMPLATED_TYPES = ("llama", "mistral", "mixtral")

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
class Recipe:
    """Where a Hugging Face family keeps each piece of a decoder, as state-dict paths (``{i}``: the layer).

    A layer is ``x + post_attn(attn(attn_norm(x)))`` then ``x + post_ffn(mlp(ffn_norm(x)))``; a norm named None
    is absent. `positions` is a learned position table added to the token embedding (Gemma's sqrt(hidden)
    embedding scale is its embedding module's own); `softcap` names the config key of the final-logit soft-cap.
    """

    layer: str
    attn_norm: str
    attn: str
    ffn_norm: str
    mlp: str
    embed: str
    final_norm: str
    lm_head: str = "lm_head"
    post_attn: str | None = None
    post_ffn: str | None = None
    positions: str | None = None
    softcap: str | None = None
    rope: bool = True


_DECODER = Recipe(layer="model.layers.{i}", attn_norm="input_layernorm", attn="self_attn",
                  ffn_norm="post_attention_layernorm", mlp="mlp", embed="model.embed_tokens", final_norm="model.norm")
#: Families run through transformers' own modules, with their layer recipe.
HF_RECIPES: dict[str, Recipe] = {
    "qwen2": _DECODER, "qwen3": _DECODER, "qwen3_moe": _DECODER, "phi3": _DECODER, "deepseek_v3": _DECODER,
    "gpt_oss": _DECODER,
    "gemma2": Recipe(layer="model.layers.{i}", attn_norm="input_layernorm", attn="self_attn",
                     post_attn="post_attention_layernorm", ffn_norm="pre_feedforward_layernorm", mlp="mlp",
                     post_ffn="post_feedforward_layernorm", embed="model.embed_tokens", final_norm="model.norm",
                     softcap="final_logit_softcapping"),
    "gpt_neox": Recipe(layer="gpt_neox.layers.{i}", attn_norm="input_layernorm", attn="attention",
                       ffn_norm="post_attention_layernorm", mlp="mlp", embed="gpt_neox.embed_in",
                       final_norm="gpt_neox.final_layer_norm"),
    "gpt2": Recipe(layer="transformer.h.{i}", attn_norm="ln_1", attn="attn", ffn_norm="ln_2", mlp="mlp",
                   embed="transformer.wte", positions="transformer.wpe", final_norm="transformer.ln_f", rope=False),
}
SUPPORTED_TYPES = TEMPLATED_TYPES + tuple(sorted(HF_RECIPES))


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
    family: str = "llama"  # the model_type: a written-out template or a key of HF_RECIPES
    parallel_residual: bool = False  # GPT-NeoX: the FFN reads the layer's input, not the attention's output

    @property
    def templated(self) -> bool:
        return self.family in TEMPLATED_TYPES


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
    onnx: bool = True  # whether `compiler.emit.onnx_export` can export it (written-out templates only)


def shape_of(config: dict[str, Any]) -> Shape:
    """The dimensions of a supported config; `UnsupportedModel` names what is missing."""
    kind = config.get("model_type")
    if kind in HF_RECIPES:
        return _hf_shape(kind, config)
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
                 layers=int(config["num_hidden_layers"]), family=kind)


def _first(config: dict[str, Any], *keys: str, default=None):
    return next((config[k] for k in keys if config.get(k) is not None), default)


def _hf_shape(kind: str, config: dict[str, Any]) -> Shape:
    """Dimensions of a Hugging Face family; K/V heads and head size are what the runtime caches per layer (for
    MLA the per-head keys and values, values zero-padded to the key width; see compiler/runtime/hf_modules.py)."""
    hidden = int(_first(config, "hidden_size", "n_embd"))
    heads = int(_first(config, "num_attention_heads", "n_head"))
    kv_heads = int(_first(config, "num_key_value_heads", default=heads))
    head_dim = int(_first(config, "head_dim", default=hidden // heads))
    if kind == "deepseek_v3":
        kv_heads = heads
        head_dim = max(int(config["qk_nope_head_dim"]) + int(config["qk_rope_head_dim"]), int(config["v_head_dim"]))
    return Shape(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 intermediate=int(_first(config, "intermediate_size", "n_inner", default=4 * hidden)),
                 experts=int(_first(config, "num_local_experts", "n_routed_experts", "num_experts", default=0)),
                 top_k=int(_first(config, "num_experts_per_tok", "experts_per_token", default=0)),
                 eps=float(_first(config, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", default=1e-6)),
                 layers=int(_first(config, "num_hidden_layers", "n_layer")), family=kind,
                 parallel_residual=bool(kind == "gpt_neox" and config.get("use_parallel_residual", True)))


def rank_slice(shape: Shape, tp: int, rank: int) -> RankSlice:
    """Even split of heads and FFN columns over `tp` ranks; refuses splits that do not divide."""
    if tp > 1 and not shape.templated:
        raise UnsupportedModel(f"tp={tp}: model_type {shape.family!r} runs on Hugging Face's modules, which have "
                               f"no tensor-parallel stage program yet (tensor parallelism: "
                               f"{', '.join(TEMPLATED_TYPES)}); place it with tp=1")
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
    if not shape.templated:
        check_stage(shape, blocks)
        return _hf_program(config, shape, blocks, sl, title)
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
        return ('def embed(w, ids, positions):\n    return F.embedding(ids, w["embed_tokens"])\n',
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


def check_stage(shape: Shape, blocks: list[str]) -> None:
    """Refuse a stage a template cannot run: a parallel-residual FFN whose layer's attention is elsewhere."""
    if not shape.parallel_residual:
        return
    for b in blocks:
        if b.startswith("L"):
            layer, kind = b[1:].split(".")
            twin = f"L{layer}.{'ffn' if kind == 'attn' else 'attn'}"
            if twin not in blocks:
                raise UnsupportedModel(
                    f"{shape.family} use_parallel_residual=true: the FFN of layer {layer} reads the layer's input, "
                    f"so {b} and {twin} must run in one stage; place attention and FFN together, or use a config "
                    f"with use_parallel_residual=false")


def check_pool(shape: Shape, tp: int, stages: list[list[str]]) -> None:
    """`UnsupportedModel` when no stage program can run a pool of `tp` ranks over these stages' blocks."""
    rank_slice(shape, tp, 0)
    if not shape.templated:
        for blocks in stages:
            check_stage(shape, blocks)


@functools.lru_cache(maxsize=4)
def _state_keys(config_json: str) -> tuple[str, ...]:
    """The state-dict keys of the model (tied weights under both names), from a skeleton on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {k: v for k, v in json.loads(config_json).items() if k != "_gimletc"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    return tuple(model.state_dict())


def _hf_program(config: dict[str, Any], shape: Shape, blocks: list[str], sl: RankSlice, title: str) -> StageProgram:
    """A program calling transformers' own submodules in the order of the family's `Recipe`."""
    recipe = HF_RECIPES[shape.family]
    config_json = json.dumps(config, sort_keys=True)
    keys = _state_keys(config_json)
    used: list[str] = []

    def mod(path: str) -> str:
        used.append(path)
        return f'hf.module(w, "{path}")'

    body = [_hf_rope(recipe)]
    for block in blocks:
        body.append(_hf_block(block, recipe, shape, config, mod, used))
    refs = {k: WeightRef(k) for path in used for k in keys if k.startswith(path + ".")}
    for path in used:
        if not any(k.startswith(path + ".") for k in keys):
            raise UnsupportedModel(f"model_type {shape.family!r}: the model has no module {path!r} (its recipe in "
                                   f"compiler/emit/stage_programs.py does not match this transformers version)")
    header = (f'"""Stage program {title}. Generated by gimletc; do not edit\n'
              f'(plan/manifest.json holds its sha256, checked before it runs).\n\n'
              f'Blocks: {", ".join(blocks) or "none"}. model_type {shape.family}: each block calls the model\'s own\n'
              f'Hugging Face submodules, named by state-dict path, with the tensors of this stage\'s shard\n'
              f'(compiler/runtime/hf_modules.py). Tokens are flat, x (N, {shape.hidden}); attention calls\n'
              f'attend(layer, q, k, v, ...), the runtime\'s paged KV cache.\n"""\n'
              'import json\n\nimport torch\n\nfrom compiler.runtime.hf_modules import HFModules\n\n'
              f'CONFIG = json.loads({config_json!r})\nhf = HFModules(CONFIG)\n')
    table = "BLOCKS = {\n" + "".join(f"    {b!r}: {_fn(b)},\n" for b in blocks) + "}\n"
    source = header + "\n\n" + "\n\n".join(body) + "\n\n" + table
    return StageProgram(source, tuple(sorted(refs.items())), tuple(blocks), sl, onnx=False)


def _hf_rope(recipe: Recipe) -> str:
    if not recipe.rope:
        return 'def rope_tables(w, positions, dtype):\n    return None, None  # learned positions, added by embed\n'
    return ('def rope_tables(w, positions, dtype):\n'
            '    """cos and sin of each token\'s position from the model\'s own rotary embedding."""\n'
            '    return hf.rope(positions, dtype)\n')


def _hf_block(block: str, recipe: Recipe, shape: Shape, config: dict[str, Any], mod, used: list[str]) -> str:
    if block == "embed":
        lines = [f"    x = {mod(recipe.embed)}(ids)"]
        if recipe.positions:
            lines.append(f"    x = x + {mod(recipe.positions)}(positions)")
        return "def embed(w, ids, positions):\n" + "\n".join(lines) + "\n    return x\n"
    if block == "head":
        text = f"def head(w, x):\n    logits = {mod(recipe.lm_head)}({mod(recipe.final_norm)}(x))\n"
        cap = config.get(recipe.softcap) if recipe.softcap else None
        if cap:
            text += f"    logits = torch.tanh(logits / {float(cap)!r}) * {float(cap)!r}  # final-logit soft-cap\n"
        return text + "    return logits\n"
    layer, kind = block[1:].split(".")
    p = recipe.layer.format(i=layer) + "."
    if kind == "attn":
        lines = [f"def L{layer}_attn(w, x, cos, sin, attend):"]
        if shape.parallel_residual:
            lines.append(f"    hf.stash({layer}, x)  # L{layer}_ffn reads the layer's input (parallel residual)")
        lines.append(f"    h = {mod(p + recipe.attn_norm)}(x)")
        used.append(p + recipe.attn)
        lines.append(f'    a = hf.attention(w, "{p + recipe.attn}", h, cos, sin, attend)')
        if recipe.post_attn:
            lines.append(f"    a = {mod(p + recipe.post_attn)}(a)")
        return "\n".join(lines) + "\n    return x + a\n"
    lines = [f"def L{layer}_{kind}(w, x):"]
    source = f"hf.stashed({layer})" if shape.parallel_residual else "x"
    lines.append(f"    h = {mod(p + recipe.ffn_norm)}({source})")
    used.append(p + recipe.mlp)
    lines.append(f'    f = hf.mlp(w, "{p + recipe.mlp}", h)')
    if recipe.post_ffn:
        lines.append(f"    f = {mod(p + recipe.post_ffn)}(f)")
    return "\n".join(lines) + "\n    return x + f\n"
