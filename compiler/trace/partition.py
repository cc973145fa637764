"""Partition traced phases into a `BlockGraph`.

Before: a `TracedModel` (one aten-level ExportedProgram per phase, shapes
symbolic in B, S, L). After: a `BlockGraph` of blocks ``embed``,
``L{i}.attn``, ``L{i}.ffn`` / ``L{i}.moe``, ``head`` per phase, each with its
ops' FLOPs and bytes as polynomials, its resident weights and KV, and sized
edges. No fx object survives into the result.

Which block owns each node is `compiler.trace.ownership`'s rule; see [Note: which block owns a node].
An FFN block whose nodes use routed experts is named ``L{i}.moe``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from compiler.ir.block_graph import Block, BlockGraph, Edge, OpCost, UnaccountedOp, merge_ops
from compiler.ir.errors import UnsupportedModel
from compiler.ir.poly import VARIABLES, Poly
from compiler.trace.export import TracedModel, TracedPhase
from compiler.trace.ownership import assign_blocks, block_name, block_order, is_routed_expert
from cost_models.op_accounting import OpCount, TensorRef, count_op, is_score, op_name

log = logging.getLogger(__name__)

_VIEW_KEEP_READ = frozenset({"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "unsqueeze",
                             "squeeze", "alias", "detach", "contiguous", "clone", "unflatten", "flatten",
                             "view_as", "expand", "expand_as", "getitem", "dropout", "movedim"})
_CASTS = frozenset({"to", "_to_copy", "_to_dtype", "type_as"})


class _Symbolic:
    """Turns shapes holding SymInts into sympy expressions in B, S, L, and those into `Poly`s (memoized)."""

    def __init__(self, symbols: dict[str, str]):
        import sympy

        self._sympy = sympy
        self._vars = [sympy.Symbol(v, positive=True, integer=True) for v in VARIABLES]
        by_name = dict(zip(VARIABLES, self._vars))
        self._subs = {sympy.Symbol(name, positive=True, integer=True): by_name[var] for name, var in symbols.items()}
        self._raw_subs = {name: by_name[var] for name, var in symbols.items()}
        self._expr_memo: dict[Any, Any] = {}
        self._poly_memo: dict[Any, Poly] = {}

    def dim(self, d) -> Any:
        import torch

        if isinstance(d, int):
            return d
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if expr in self._expr_memo:
                return self._expr_memo[expr]
            subs = {s: self._raw_subs[s.name] for s in expr.free_symbols if s.name in self._raw_subs}
            out = expr.xreplace(subs)
            if out.is_Integer:
                out = int(out)
            self._expr_memo[expr] = out
            return out
        return int(d)

    def poly(self, expr) -> Poly:
        if isinstance(expr, int):
            return Poly.const(expr)
        if expr in self._poly_memo:
            return self._poly_memo[expr]
        p = self._sympy.Poly(self._sympy.expand(expr), *self._vars)
        acc = {}
        for exps, coeff in p.terms():
            if not coeff.is_Integer:
                raise ValueError(f"non-integer coefficient in {expr}")
            acc[tuple(exps)] = int(coeff)
        out = Poly._build(acc)
        self._poly_memo[expr] = out
        return out


@dataclass
class _TensorInfo:
    ref: TensorRef
    carries: bool  # depends on a weight or the KV cache (not position-only)


class _PhaseAccountant:
    """Walks one phase's graph: tensor facts per node, op counts per block."""

    def __init__(self, traced: TracedModel, phase: TracedPhase):
        from torch.export.graph_signature import InputKind

        self.phase = phase
        self.sym = _Symbolic(phase.symbols)
        self.program = phase.program
        sig = self.program.graph_signature
        self.param_fqn = {s.arg.name: s.target for s in sig.input_specs if s.kind == InputKind.PARAMETER}
        self.cache_inputs = set(phase.cache_inputs)
        self.info: dict[str, _TensorInfo] = {}
        self.count_memo: dict[Any, OpCount] = {}
        self.param_numel: dict[str, int] = {}

    def _ref_of_val(self, val, category="act", read=None, expert=False) -> TensorRef:
        shape = tuple(self.sym.dim(d) for d in val.shape)
        if category == "act" and is_score(shape):
            category = "score"
        return TensorRef(shape, val.dtype.itemsize, category, read, expert)

    def placeholder(self, node) -> None:
        val = node.meta.get("val")
        if not hasattr(val, "shape"):
            return
        if node.name in self.param_fqn:
            fqn = self.param_fqn[node.name]
            self.param_numel[node.name] = val.numel()
            self.info[node.name] = _TensorInfo(self._ref_of_val(val, "weight", expert=is_routed_expert(fqn)), True)
        elif node.name in self.cache_inputs:
            self.info[node.name] = _TensorInfo(self._ref_of_val(val, "kv"), True)
        else:
            self.info[node.name] = _TensorInfo(self._ref_of_val(val), False)

    def call(self, node) -> OpCount | None:
        """Record the node's output facts and return its op count (None for non-tensor outputs)."""
        name = op_name(node.target)
        ins = [a for a in node.all_input_nodes if a.name in self.info]
        in_infos = [self.info[a.name] for a in ins]
        carries = any(i.carries for i in in_infos)
        val = node.meta.get("val")
        outs = [v for v in (val if isinstance(val, (tuple, list)) else [val]) if hasattr(v, "shape") and hasattr(v, "dtype")]
        first = in_infos[0].ref if in_infos else None
        if name in _CASTS and ins and outs and getattr(ins[0].meta.get("val"), "dtype", None) == outs[0].dtype:
            name = "alias"  # a cast to the same dtype moves nothing
        kv_append = name == "cat" and any(i.ref.category == "kv" for i in in_infos)
        is_mask = bool(outs) and all(str(o.dtype) == "torch.bool" for o in outs)
        if outs:
            out_ref = self._output_ref(name, outs[0], first, kv_append)
            self.info[node.name] = _TensorInfo(out_ref, carries)
        if not outs:
            return OpCount("layout")
        key = (name, tuple(i.ref for i in in_infos), tuple(self._ref_of_val(o) for o in outs), kv_append, is_mask)
        if key not in self.count_memo:
            args = [self.info[a.name].ref.shape if isinstance(a, type(node)) and a.name in self.info else a
                    for a in node.args]
            self.count_memo[key] = count_op(name, key[1], key[2], args, kv_append=kv_append, is_mask=is_mask)
        return self.count_memo[key]

    def _output_ref(self, name: str, out, first: TensorRef | None, kv_append: bool) -> TensorRef:
        if kv_append:
            return self._ref_of_val(out, "kv")
        if first is not None and name in _VIEW_KEEP_READ:
            ref = self._ref_of_val(out, first.category, expert=first.expert)
            read = first.elems_read if name in ("expand", "expand_as") or first.read_elems is not None else None
            return TensorRef(ref.shape, ref.itemsize, ref.category, read, ref.expert)
        if first is not None and name in ("slice", "select", "split", "split_with_sizes", "chunk", "unbind", "narrow"):
            return self._ref_of_val(out, first.category, expert=first.expert)
        return self._ref_of_val(out)


@dataclass
class PhaseParts:
    """One phase partitioned, its folded layers not yet expanded: what `assemble` joins into a `BlockGraph`.

    Plain IR values only (no fx object), so a phase partitioned in another process travels as JSON
    (`to_json`; see `compiler.trace.concurrent`).
    """

    phase: str
    blocks: list[Block]
    edges: list[Edge]
    unaccounted: list[UnaccountedOp]
    layer_kv: dict[int, int]  # traced layer -> KV elements per token its cache inputs hold
    symbols: dict[str, str]
    example: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "blocks": [b.to_json() for b in self.blocks],
                "edges": [e.to_json() for e in self.edges],
                "unaccounted": [[u.phase, u.block, u.op, u.count] for u in self.unaccounted],
                "layer_kv": sorted(self.layer_kv.items()), "symbols": self.symbols, "example": self.example}

    @staticmethod
    def from_json(d: dict[str, Any]) -> PhaseParts:
        return PhaseParts(d["phase"], [Block.from_json(b) for b in d["blocks"]], [Edge.from_json(e) for e in d["edges"]],
                          [UnaccountedOp(*u) for u in d["unaccounted"]], {int(k): int(v) for k, v in d["layer_kv"]},
                          dict(d["symbols"]), {k: int(v) for k, v in d["example"].items()})


def partition(traced: TracedModel, model_name: str | None = None) -> BlockGraph:
    """Split every traced phase into blocks; see the module docstring."""
    return assemble(traced, [phase_parts(traced, p) for p in traced.phases.values()], model_name)


def phase_parts(traced: TracedModel, phase: TracedPhase) -> PhaseParts:
    """One phase's blocks, activation edges and unaccounted ops; also KV elements per token by layer.

    Steps: `_walk` (count every node into its owner's block), then `_blocks` and
    `_activation_edges` (turn the counts into IR values).
    """
    owner = assign_blocks(phase.program)
    acct = _PhaseAccountant(traced, phase)
    counts = _walk(phase, owner, acct)
    layer_kv: dict[int, int] = {}
    for (layer, _), n in counts.cache_elems.items():
        layer_kv[layer] = layer_kv.get(layer, 0) + n
    names = {k: block_name(k[0], k[1], "moe" if k[1] in counts.moe_layers else "ffn") for k in owner.values()}
    blocks = _blocks(traced, phase.phase, sorted(set(owner.values()), key=lambda k: block_order(*k)), names, counts,
                     acct, layer_kv)
    unaccounted = [UnaccountedOp(phase.phase, names[key], name, n)
                   for (key, name), n in sorted(counts.missing.items(), key=lambda kv: (block_order(*kv[0][0]), kv[0][1]))]
    return PhaseParts(phase.phase, blocks, _activation_edges(phase.program, owner, names, acct, phase.phase),
                      unaccounted, layer_kv, dict(phase.symbols), dict(phase.example))


def assemble(traced: TracedModel, parts: list[PhaseParts], model_name: str | None = None) -> BlockGraph:
    """Join partitioned phases into the model's `BlockGraph`: expand folded layers, and give prefill attention
    blocks the KV their decode twins keep (a prefill traced without a cache has no cache inputs of its own)."""
    by_phase = {p.phase: p for p in parts}
    kept = by_phase["decode"].layer_kv if "decode" in by_phase else {}
    blocks: list[Block] = []
    edges: list[Edge] = []
    unaccounted: list[UnaccountedOp] = []
    for phase in ("decode", "prefill"):
        if phase not in by_phase:
            continue
        p = by_phase[phase]
        b = p.blocks
        if phase == "prefill" and kept:
            b = [replace(x, kv_elems_per_token=x.kv_elems_per_token + kept.get(x.layer, 0)) if x.role == "attn" else x
                 for x in b]
        b, e, u = (b, p.edges, p.unaccounted) if not traced.folded else \
            _expand_layers(traced, phase, b, p.edges, p.unaccounted)
        blocks += b
        edges += e
        unaccounted += u
    order = {"prefill": 0, "decode": 1}
    blocks.sort(key=lambda b: (order[b.phase], block_order(b.role if b.role in ("embed", "head") else
                                                            ("attn" if b.role == "attn" else "ffn"), b.layer)))
    if "prefill" in by_phase and "decode" in by_phase:
        for b in blocks:
            if b.phase == "prefill" and b.role == "attn" and b.kv_elems_per_token:
                edges.append(Edge(b.name, b.name, "kv", "decode", kv_elems_per_token=b.kv_elems_per_token))
    edges.sort(key=lambda e: (order[e.phase], e.kind, _edge_order(e.src), _edge_order(e.dst)))
    import torch
    import transformers

    phases = [by_phase[p] for p in ("prefill", "decode") if p in by_phase]
    trace_info = tuple(sorted((
        ("tool", traced.tool),
        ("torch", torch.__version__),
        ("transformers", transformers.__version__),
        ("symbolic", ",".join(f"{p.phase}:{'+'.join(sorted(set(p.symbols.values())))}" for p in phases)),
        ("example", ";".join(f"{p.phase}:" + ",".join(f"{k}={v}" for k, v in p.example.items()) for p in phases)),
    )))
    return BlockGraph(
        model=model_name or traced.spec.name, config_sha256=traced.spec.sha256,
        params_total=traced.params_total, params_active=traced.params_active, embed_params=traced.embed_params,
        blocks=tuple(blocks), edges=tuple(edges), unaccounted=tuple(unaccounted), trace=trace_info,
    )


def _edge_order(name: str) -> int:
    if name == "embed":
        return 0
    if name == "head":
        return 1 << 30
    layer, role = name[1:].split(".")
    return block_order("attn" if role == "attn" else "ffn", int(layer))


@dataclass
class _PhaseCounts:
    """What one walk over a phase's graph collects, per owning block key ``(role, layer)``."""

    ops: dict = field(default_factory=lambda: defaultdict(list))  # key -> [OpCost]
    params: dict = field(default_factory=lambda: defaultdict(set))  # key -> parameter placeholder names
    cache_elems: dict = field(default_factory=dict)  # (layer, cache input) -> KV elements per token
    moe_layers: set = field(default_factory=set)
    missing: dict = field(default_factory=lambda: defaultdict(int))  # (key, op) -> nodes without a cost rule
    dispatches: dict = field(default_factory=lambda: defaultdict(int))  # key -> aten calls


def _walk(phase: TracedPhase, owner: dict, acct: _PhaseAccountant) -> _PhaseCounts:
    """Count every call node of the phase into the block that owns it."""
    counts = _PhaseCounts()
    for node in phase.program.graph.nodes:
        if node.op == "placeholder":
            acct.placeholder(node)
            continue
        if node.op != "call_function":
            continue
        key = owner[node.name]
        if _is_dispatch(node):
            counts.dispatches[key] += 1
        _note_inputs(node, key, acct, counts)
        count = acct.call(node)
        if count is None or count.kind in ("layout", "mask"):
            continue
        name = op_name(node.target)
        if count.kind == "unaccounted":
            counts.missing[(key, name)] += 1
            continue
        try:
            counts.ops[key].append(OpCost(name, count.kind, 1, acct.sym.poly(count.flops),
                                          acct.sym.poly(count.weight_elems), acct.sym.poly(count.kv_elems),
                                          acct.sym.poly(count.act_bytes), count.expert_weights))
        except (ValueError, TypeError) as e:  # a non-polynomial shape expression
            log.warning("%s: op %s in %s has a non-polynomial cost (%s)", phase.phase, name, key, e)
            counts.missing[(key, name)] += 1
    return counts


def _note_inputs(node, key: tuple[str, int | None], acct: _PhaseAccountant, counts: _PhaseCounts) -> None:
    """Record the weights a node reads (and whether they are routed experts) and the KV cache it reads."""
    for a in node.all_input_nodes:
        if a.name in acct.param_fqn:
            counts.params[key].add(a.name)
            if is_routed_expert(acct.param_fqn[a.name]) and key[1] is not None:
                counts.moe_layers.add(key[1])
        elif a.name in acct.cache_inputs and key[1] is not None and key[0] == "attn":
            per_token = 1
            for i, d in enumerate(a.meta["val"].shape):
                if i not in (0, 2):  # every dimension but batch and sequence
                    per_token *= int(d)
            counts.cache_elems[(key[1], a.name)] = per_token


def _blocks(traced: TracedModel, phase: str, keys: list, names: dict, counts: _PhaseCounts, acct: _PhaseAccountant,
            layer_kv: dict[int, int]) -> list[Block]:
    blocks = []
    for key in keys:
        role, layer = key
        if role == "ffn" and layer in counts.moe_layers:
            role = "moe"
        attention, window = _attention_kind(traced, layer) if role == "attn" else (None, None)
        blocks.append(Block(
            name=names[key], role=role, phase=phase, layer=layer, ops=merge_ops(counts.ops[key]),
            weight_params=sum(acct.param_numel[p] for p in counts.params[key]),
            expert_params=sum(acct.param_numel[p] for p in counts.params[key] if is_routed_expert(acct.param_fqn[p])),
            kv_elems_per_token=layer_kv.get(layer, 0) if role == "attn" else 0,
            attention=attention, window_tokens=window,
            experts=traced.experts if role == "moe" else 0,
            experts_per_token=traced.experts_per_token if role == "moe" else 0,
            dispatches=counts.dispatches[key],
        ))
    return blocks


def _expand_layers(traced: TracedModel, phase: str, blocks: list[Block], edges: list[Edge],
                   unaccounted: list[UnaccountedOp]):
    """Expand blocks of the traced (folded) layers to every model layer. See [Note: depth folding].

    Every traced edge must come from the destination's own layer or from the
    block just before that layer (the previous layer's last block, or embed):
    true of sequential decoders and of parallel-residual ones (GPT-NeoX), whose
    layer input reaches both attention and FFN. Each model layer gets its
    representative's edges with those sources renamed; any other edge is refused.
    """
    order = sorted(blocks, key=lambda b: _edge_order(b.name))
    by_name = {b.name: b for b in order}
    position = {b.name: i for i, b in enumerate(order)}

    def layer_start(b: Block) -> int:  # position of the first block of b's layer (head: itself)
        return min(position[x.name] for x in order if x.layer == b.layer) if b.layer is not None else position[b.name]

    relative: dict[str, list[tuple[str | None, Edge]]] = defaultdict(list)  # dst -> (src role in its layer | prev)
    for e in edges:
        src, dst = by_name[e.src], by_name[e.dst]
        if src.layer is not None and src.layer == dst.layer:
            relative[e.dst].append((e.src.split(".", 1)[1], e))
        elif position[e.src] == layer_start(dst) - 1:
            relative[e.dst].append((None, e))
        else:
            raise UnsupportedModel(
                f"{traced.spec.name}: in {phase}, block {e.dst} reads {e.src}, which is neither in its layer nor the "
                f"block before it; gimletc partitions decoders whose layers run one after another")
    by_layer: dict[int | None, list[Block]] = defaultdict(list)
    for b in order:
        by_layer[b.layer].append(b)
    expanded: list[Block] = list(by_layer[None][:1])  # embed
    for i, j in enumerate(traced.layer_map):
        for b in by_layer[j]:
            attention, window = _attention_kind(traced, i) if b.role == "attn" else (None, None)
            expanded.append(replace(b, name=f"L{i}.{b.name.split('.', 1)[1]}", layer=i,
                                    attention=attention, window_tokens=window))
    expanded += [b for b in by_layer[None] if b.role == "head"]
    new_edges = []
    before_layer: Block | None = None  # the last expanded block of the previous layer
    for k, b in enumerate(expanded):
        rep = b.name if b.layer is None else f"L{traced.layer_map[b.layer]}.{b.name.split('.', 1)[1]}"
        if k == 0 or expanded[k - 1].layer != b.layer:
            before_layer = expanded[k - 1] if k else None
        for role, e in relative.get(rep, ()):
            src = before_layer.name if role is None else f"L{b.layer}.{role}"
            new_edges.append(replace(e, src=src, dst=b.name))
    new_missing = []
    for u in unaccounted:
        if u.block in ("embed", "head"):
            new_missing.append(u)
            continue
        j, role = int(u.block[1:].split(".")[0]), u.block.split(".", 1)[1]
        new_missing += [replace(u, block=f"L{i}.{role}") for i, jj in enumerate(traced.layer_map) if jj == j]
    return expanded, new_edges, new_missing


_BOOKKEEPING = frozenset({"sym_size", "sym_numel", "sym_stride", "getitem", "_assert_scalar",
                          "sym_constrain_range_for_size"})


def _is_dispatch(node) -> bool:
    """An aten call that eager execution dispatches (shape arithmetic and tuple access are not)."""
    import torch

    return isinstance(node.target, torch._ops.OpOverload) and op_name(node.target) not in _BOOKKEEPING


def _attention_kind(traced: TracedModel, layer: int) -> tuple[str, int | None]:
    """``mla`` (DeepSeek's latent KV), ``sliding`` with its window, or ``full``. Without per-layer types, a
    config's ``sliding_window`` applies to every layer (Mistral, Phi-3)."""
    config = traced.spec.config
    if config.get("kv_lora_rank"):
        return "mla", None
    if traced.layer_types and layer < len(traced.layer_types):
        if traced.layer_types[layer] == "sliding_attention":
            return "sliding", traced.sliding_window
        return "full", None
    if traced.sliding_window:
        return "sliding", traced.sliding_window
    return "full", None


def _activation_edges(program, owner, names, acct: _PhaseAccountant, phase: str) -> list[Edge]:
    """Bytes of the activation tensors that cross from one block to another."""
    sizes: dict[tuple[str, str], Poly] = defaultdict(Poly)
    for node in program.graph.nodes:
        info = acct.info.get(node.name)
        if node.name not in owner or info is None or not info.carries or info.ref.category != "act":
            continue
        src = names[owner[node.name]]
        targets = {names[owner[u.name]] for u in node.users if u.name in owner} - {src}
        nbytes = acct.sym.poly(info.ref.numel * info.ref.itemsize)
        for dst in targets:
            sizes[(src, dst)] = sizes[(src, dst)] + nbytes
    return [Edge(src, dst, "activation", phase, act_bytes=b) for (src, dst), b in sizes.items()]
