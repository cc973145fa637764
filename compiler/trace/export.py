"""Trace a model into aten-level FX graphs for prefill and decode.

Before: a `ModelSpec`. After: a `TracedModel` holding one `torch.export`
`ExportedProgram` per phase, with symbolic shapes:

- prefill: ``input_ids`` of shape (B, S), no cache;
- decode: ``input_ids`` of shape (B, 1) and the KV cache a prefill of length L
  leaves behind, with B and L symbolic; multi-head latent attention decodes in the
  absorbed form serving engines run (`compiler.trace.absorbed_mla`, [Note: absorbed MLA]).

Models are built on the meta device (no weight memory) unless the caller
passes a real model (tests do, to execute the split graphs). Export runs
``strict=False``; decode uses transformers' cache pytree registration and
export patches (see FIELD_NOTES.md). ``torch.fx.symbolic_trace`` is not a
fallback: it cannot trace Hugging Face decoder code.

[Note: example sizes] Example dimensions are distinct values no weight
dimension uses (B=3, S=17, L=19), so export's duck sizing cannot merge them
with each other or with a constant. Decode is traced with every layer's cache
growing with L, sliding-window layers included: one graph serves every context
length, and a sliding block's cost is clamped to its window where it is
evaluated (`Block.at`), so short contexts are not charged a whole window.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from compiler.ir.errors import BadInput, UnsupportedModel
from compiler.ir.precision import TORCH_DTYPES
from compiler.inputs.model_spec import ModelSpec, import_callable, load_hf_config
from compiler.trace.ownership import is_routed_expert

log = logging.getLogger(__name__)

EXAMPLE_BATCH = 3
EXAMPLE_PROMPT = 17
EXAMPLE_CONTEXT = 19


@dataclass
class TracedPhase:
    """One exported phase and what its placeholders mean (holds fx objects: internal to trace/partition)."""

    phase: str
    program: Any  # torch.export.ExportedProgram
    symbols: dict[str, str]  # sympy symbol name -> shape variable ("B", "S", "L")
    cache_inputs: tuple[str, ...] = ()  # placeholder names of KV-cache inputs
    example: dict[str, int] = field(default_factory=dict)


@dataclass
class TracedModel:
    """``layer_map[i]`` is the traced layer that stands for model layer i (see [Note: depth folding])."""

    spec: ModelSpec
    phases: dict[str, TracedPhase]
    params_total: int
    params_active: int
    embed_params: int
    experts: int = 0
    experts_per_token: int = 0
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    layer_map: tuple[int, ...] = ()
    tool: str = "torch.export(strict=False)"

    @property
    def folded(self) -> bool:
        return bool(self.layer_map) and len(set(self.layer_map)) < len(self.layer_map)


def build_model(spec: ModelSpec, *, device: str = "meta", dtype: str = "bf16", seed: int | None = None):
    """Build the spec's model. Returns ``(module, example_inputs or None)``.

    ``example_inputs`` is only set for ``module:callable`` specs that return
    ``(module, inputs)``.
    """
    import torch

    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    if seed is not None:
        torch.manual_seed(seed)
    if spec.kind == "callable":
        factory = import_callable(spec)
        with torch.device(device):
            try:
                built = factory()
            except Exception as e:
                raise BadInput(f"model {spec.source!r}: the callable raised {type(e).__name__}: {e}") from None
        module, inputs = built if isinstance(built, tuple) else (built, None)
        if not isinstance(module, torch.nn.Module):
            raise BadInput(f"model {spec.source!r}: the callable must return an nn.Module or (nn.Module, inputs), "
                           f"got {type(module).__name__}")
        return module.eval(), inputs
    from transformers import AutoModelForCausalLM

    config = load_hf_config(spec)
    try:
        with torch.device(device):
            module = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    except ValueError as e:
        raise UnsupportedModel(f"model {spec.name!r}: transformers has no causal-LM class for "
                               f"model_type {config.model_type!r} ({str(e).splitlines()[0]}); "
                               f"pass module:callable building the model instead") from None
    return module.eval(), None


def _moe_shape(config) -> tuple[int, int]:
    experts = next((getattr(config, k) for k in ("num_local_experts", "n_routed_experts", "num_experts")
                    if getattr(config, k, None)), 0)
    per_token = getattr(config, "num_experts_per_tok", 0) or getattr(config, "experts_per_token", 0) or 0
    return int(experts), int(per_token)


def count_params(module, experts: int, per_token: int) -> tuple[int, int, int]:
    """(total, active, embedding) parameter counts; tied weights count once.

    [Note: active parameters] Active parameters are those a token's matmuls
    read: routed-expert weights (names containing ``.experts.``; shared experts
    are always active) scaled by top-k / experts, and without the input
    embedding table, whose lookup reads one row (unless the output projection
    is tied to it). This is OpenAI's convention for gpt-oss (5.1B active);
    Mistral and Qwen quote active counts that include the table, so ours are
    lower by its size (Mixtral-8x7B: 12.75B vs 12.9B).
    """
    total = expert = 0
    for name, p in module.named_parameters():
        total += p.numel()
        if is_routed_expert(name):
            expert += p.numel()
    embed = output = None
    if hasattr(module, "get_input_embeddings"):
        embed = module.get_input_embeddings().weight
        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        output = getattr(head, "weight", None)
    embed_numel = embed.numel() if embed is not None else 0
    lookup_only = embed_numel if output is None or output is not embed else 0
    active = total - lookup_only - (round(expert * (1 - per_token / experts)) if experts else 0)
    return total, active, embed_numel


def trace(spec: ModelSpec, phases: tuple[str, ...] = ("prefill", "decode"), *, model=None,
          fold: bool = True, sliding_kv: str = "full") -> TracedModel:
    """Export the requested phases of `spec` (built on meta unless `model` is given).

    With `fold`, identical decoder layers are traced once; see [Note: depth folding].
    `sliding_kv` picks the decode cache of sliding-window layers: ``full`` (every
    token kept, the window applied by the mask: one decode graph serves every
    context length; costs clamp to the window, see [Note: example sizes]) or
    ``ring`` (the model's own cache, which keeps the last window of tokens and
    bakes its fill level into the cache structure).
    """
    traced, model, example_inputs = begin(spec, model=model, fold=fold)
    if example_inputs is not None:  # a plain nn.Module from module:callable: prefill only
        traced.phases["prefill"] = _export_custom(model, example_inputs)
        return traced
    for phase in ("prefill", "decode"):
        if phase in phases:
            traced.phases[phase] = export_phase(traced, model, phase, sliding_kv)
    return traced


def begin(spec: ModelSpec, *, model=None, fold: bool = True):
    """Build `spec`'s model (unless given) and describe it: ``(TracedModel without phases, model,
    example_inputs)``, the last set only for ``module:callable`` specs that return inputs (see `build_model`)."""
    example_inputs = None
    if model is None:
        model, example_inputs = build_model(spec)
    config = getattr(model, "config", None)
    experts, per_token = _moe_shape(config) if config is not None else (0, 0)
    total, active, embed = count_params(model, experts, per_token)
    window = getattr(config, "sliding_window", None) if config is not None else None
    layer_types = tuple(getattr(config, "layer_types", None) or ()) if config is not None else ()
    if window and (getattr(config, "use_sliding_window", True) is False
                   or (layer_types and "sliding_attention" not in layer_types)):
        window = None  # a config default that no layer uses
    traced = TracedModel(spec, {}, total, active, embed, experts, per_token, window, layer_types)
    if example_inputs is None:
        layers = decoder_layers(model)
        traced.layer_map = tuple(range(len(layers))) if layers is not None else ()
        if fold and layers is not None:
            traced.layer_map = _fold_layers(model, layers)
    return traced, model, example_inputs


def export_phase(traced: TracedModel, model, phase: str, sliding_kv: str = "full") -> TracedPhase:
    """Export one phase (``prefill`` or ``decode``) of a Hugging Face decoder described by `traced` (`begin`)."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        if phase == "prefill":
            return _export_prefill(model, device)
        return _export_decode(model, device, traced.sliding_window if sliding_kv == "ring" else None)


def decoder_layers(model):
    """The model's decoder-layer ModuleList (``model.layers`` in Hugging Face decoders), or None."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h", "blocks") \
                and len(module) > 0:
            return module
    return None


def _layer_signature(layer, layer_type: str | None) -> tuple:
    params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in layer.named_parameters())
    kinds = tuple(type(m).__name__ for m in layer.modules())
    return (layer_type or getattr(layer, "attention_type", None) or getattr(layer, "layer_type", None), params, kinds)


def _fold_layers(model, layers) -> tuple[int, ...]:
    """Keep one layer per distinct signature; return the layer map. See [Note: depth folding].

    [Note: depth folding] Decoder layers with the same parameter shapes, module
    classes and attention type (full or sliding) produce the same aten graph,
    so tracing an 126-layer model costs what tracing its distinct layers costs.
    `_fold_layers` keeps the first layer of each kind, in order, renumbers their
    ``layer_idx`` (the cache slot) and shortens the config to match; the
    partition expands the traced blocks back to every layer. A test checks that
    folded and full-depth traces give the same BlockGraph.
    """
    import torch

    config = model.config
    types = list(getattr(config, "layer_types", None) or [])
    sigs = [_layer_signature(layer, types[i] if i < len(types) else None) for i, layer in enumerate(layers)]
    reps: list[int] = []
    for i, sig in enumerate(sigs):
        if sig not in (sigs[r] for r in reps):
            reps.append(i)
    layer_map = tuple(next(j for j, r in enumerate(reps) if sigs[r] == sig) for sig in sigs)
    if len(reps) == len(layers):
        return layer_map
    kept = [layers[r] for r in reps]
    for j, layer in enumerate(kept):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = j
    layers_parent = next(m for m in model.modules() if any(c is layers for c in m.children()))
    for name, child in list(layers_parent.named_children()):
        if child is layers:
            setattr(layers_parent, name, torch.nn.ModuleList(kept))
    config.num_hidden_layers = len(reps)
    if types and not isinstance(getattr(type(config), "layer_types", None), property):  # Mamba derives it
        config.layer_types = [types[r] for r in reps]
    return layer_map


def _symbol_name(dim) -> str | None:
    import torch

    return str(dim.node.expr) if isinstance(dim, torch.SymInt) else None


def _export(model, kwargs: dict, dynamic_shapes: dict, what: str):
    import torch

    try:
        return torch.export.export(model, (), kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnsupportedModel(f"model {what}: torch.export failed ({type(e).__name__}: {first}); "
                               f"this architecture is not traceable yet, please report it") from None


def _export_prefill(model, device) -> TracedPhase:
    import torch
    from torch.export import Dim

    ids = torch.zeros(EXAMPLE_BATCH, EXAMPLE_PROMPT, dtype=torch.long, device=device)
    ep = _export(model, {"input_ids": ids, "use_cache": False},
                 {"input_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "use_cache": None},
                 f"{type(model).__name__} prefill")
    ids_node = _user_inputs(ep)[0]
    b, s = ids_node.meta["val"].shape
    symbols = {name: var for name, var in ((_symbol_name(b), "B"), (_symbol_name(s), "S")) if name}
    return TracedPhase("prefill", ep, symbols, (), {"B": EXAMPLE_BATCH, "S": EXAMPLE_PROMPT})


def _decode_context(window: int | None) -> int:
    return max(EXAMPLE_CONTEXT, window + 13) if window else EXAMPLE_CONTEXT  # see [Note: example sizes]


def _export_decode(model, device, window: int | None) -> TracedPhase:
    """Export one decode step; `window` set keeps sliding layers' ring cache (see `trace`)."""
    import torch
    from torch.export import Dim
    from torch.utils._pytree import tree_flatten
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    from transformers import DynamicCache

    from compiler.trace.absorbed_mla import absorbed_mla

    context = _decode_context(window)
    prompt = torch.zeros(EXAMPLE_BATCH, context, dtype=torch.long, device=device)
    # The model's forward runs on meta too (shapes only). Without a window, every layer keeps every token.
    cache = model(input_ids=prompt, use_cache=True, **({} if window else {"cache": DynamicCache()})).cache
    register_cache_pytrees_for_model(model)
    leaves = tree_flatten(cache)[0]
    # Only cache tensors that grow with the context get a dynamic length; sliding rings stay constant.
    leaf_shapes = [{0: Dim.DYNAMIC, 2: Dim.DYNAMIC} if t.dim() >= 3 and t.shape[2] == context else {0: Dim.DYNAMIC}
                   for t in leaves]
    ids = torch.zeros(EXAMPLE_BATCH, 1, dtype=torch.long, device=device)
    with dynamo_patches(model), absorbed_mla(model):  # decode as engines run MLA: [Note: absorbed MLA]
        ep = _export(model, {"input_ids": ids, "cache": cache, "use_cache": True},
                     {"input_ids": {0: Dim.DYNAMIC}, "cache": leaf_shapes, "use_cache": None},
                     f"{type(model).__name__} decode")
    users = _user_inputs(ep)
    symbols = {_symbol_name(users[0].meta["val"].shape[0]): "B"}
    cache_nodes = [n for n in users[1:] if getattr(n.meta.get("val"), "dim", lambda: 0)() >= 3]
    for n in cache_nodes:
        name = _symbol_name(n.meta["val"].shape[2])
        if name and name not in symbols:
            symbols[name] = "L"
    symbols.pop(None, None)
    return TracedPhase("decode", ep, symbols, tuple(n.name for n in cache_nodes),
                       {"B": EXAMPLE_BATCH, "L": context})


@contextlib.contextmanager
def dynamo_patches(model):
    """transformers' torch.export patches (``apply_patches("dynamo")``) that can touch `model`: the general ones
    and those of the modules its layers come from. ``apply_patches`` itself imports every model package it holds a
    patch for (34 patches, about 110 modules and 1.7 s of a cold trace of a tiny model), though a patch of a
    module the model never loads cannot change its graph."""
    from transformers.exporters import utils as hf

    mine = {type(m).__module__ for m in model.modules()}
    reaches = lambda path: (not path.startswith("transformers.models.")  # noqa: E731
                            or any(path == name or path.startswith(name + ".") for name in mine))
    patches = [(obj, attribute, fn) for path, attribute, fn in hf._PATCHES.get("dynamo", []) if reaches(path)
               if (obj := hf.import_dotted_path(path, missing_ok=True)) is not None]
    with hf.patch_attributes(patches):
        yield


def _export_custom(model, inputs: dict) -> TracedPhase:
    """Export a plain module's prefill with its own example inputs; batch is symbolic if it can be."""
    from torch.export import Dim

    if not isinstance(inputs, dict):
        raise BadInput("module:callable must return (nn.Module, dict of example keyword tensors)")
    shapes = {k: ({0: Dim.DYNAMIC} if hasattr(v, "shape") and v.dim() >= 1 else None) for k, v in inputs.items()}
    ep = _export(model, inputs, shapes, f"{type(model).__name__} prefill")
    first = _user_inputs(ep)[0].meta["val"]
    symbols = {}
    if _symbol_name(first.shape[0]):
        symbols[_symbol_name(first.shape[0])] = "B"
    if first.dim() >= 2 and _symbol_name(first.shape[1]):
        symbols[_symbol_name(first.shape[1])] = "S"
    return TracedPhase("prefill", ep, symbols, (), {})


def _user_inputs(ep) -> list:
    from torch.export.graph_signature import InputKind

    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user]


@contextlib.contextmanager
def quiet_export_logs():
    """Export and transformers warn at length about things that do not affect accounting."""
    names = ("torch._export", "torch.export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
             "transformers")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, levels):
            lg.setLevel(lvl)
