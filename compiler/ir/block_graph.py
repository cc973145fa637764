"""The BlockGraph: a model split into blocks by role and phase, with sized edges.

This is the value every later pass reads (cost, place, emit, run); nothing
downstream re-traces the model. It holds no fx node, tensor or solver object:
blocks and edges refer to each other by name, and every FLOP and byte count is a
`Poly` in the shape variables (B, S for prefill; B, L for decode), so one trace
serves every batch size and length.

Block names: ``embed``, ``L{i}.attn``, ``L{i}.ffn`` or ``L{i}.moe``, ``head``;
the same name appears once per phase (``prefill`` and ``decode``).

Bytes are kept by kind so that one trace serves every dtype:
``weight_elems`` (read from weights, scaled by the weight dtype),
``kv_elems`` (KV-cache elements read or written, scaled by the KV dtype) and
``act_bytes`` (activations, at the traced activation dtype).

>>> b = Block(name="L0.ffn", role="ffn", phase="decode", layer=0,
...           ops=(OpCost("linear", "matmul", 3, flops=Poly.var("B") * 6, weight_elems=Poly.const(3)),),
...           weight_params=3)
>>> w = b.work(Precision.of("bf16"), B=4)
>>> w.flops, w.weight_bytes
(24, 6.0)
>>> Block.from_json(b.to_json()) == b
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from compiler.ir.poly import ZERO, Poly
from compiler.ir.precision import Precision

PHASES: tuple[str, ...] = ("prefill", "decode")
ROLES: tuple[str, ...] = ("embed", "attn", "ffn", "moe", "head")

#: Kinds of op, as op accounting classifies them.
OP_KINDS: tuple[str, ...] = ("matmul", "attention", "elementwise", "reduction", "data", "layout")


@dataclass(frozen=True, slots=True)
class OpCost:
    """All nodes of one aten op inside one block, summed.

    ``expert_weights`` marks ops that are handed every routed expert's weights
    (grouped expert matmuls): their ``weight_elems`` covers all experts, and
    `Block.work` charges only the experts a step's tokens are expected to touch.
    """

    op: str
    kind: str
    count: int
    flops: Poly = ZERO
    weight_elems: Poly = ZERO
    kv_elems: Poly = ZERO
    act_bytes: Poly = ZERO
    expert_weights: bool = False

    def __add__(self, other: OpCost) -> OpCost:
        assert (self.op, self.kind, self.expert_weights) == (other.op, other.kind, other.expert_weights)
        return OpCost(
            self.op, self.kind, self.count + other.count,
            self.flops + other.flops, self.weight_elems + other.weight_elems,
            self.kv_elems + other.kv_elems, self.act_bytes + other.act_bytes, self.expert_weights,
        )

    def work(self, precision: Precision, touched: float = 1.0, **point: float) -> Work:
        """What one step of these nodes costs at `point`.

        `touched` is the fraction of routed experts the step's tokens reach
        (`expert_touch_fraction`); it scales weight reads of ``expert_weights`` ops only.
        This is the one rule for an op's bytes: `Block.work` and the roofline both use it.
        """
        per_elem = precision.weight_bytes * touched if self.expert_weights else float(precision.dense_bytes)
        weight = self.weight_elems(**point) * per_elem
        return Work(self.flops(**point), weight, self.kv_elems(**point) * precision.kv_bytes, self.act_bytes(**point))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "kind": self.kind, "count": self.count}
        for key in ("flops", "weight_elems", "kv_elems", "act_bytes"):
            poly = getattr(self, key)
            if not poly.is_zero():
                out[key] = poly.to_json()
        if self.expert_weights:
            out["expert_weights"] = True
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> OpCost:
        polys = {k: Poly.from_json(d[k]) for k in ("flops", "weight_elems", "kv_elems", "act_bytes") if k in d}
        return OpCost(d["op"], d["kind"], int(d["count"]), expert_weights=bool(d.get("expert_weights")), **polys)


@dataclass(frozen=True, slots=True)
class Work:
    """What one step of a block costs at one point (batch, length) and dtype."""

    flops: float
    weight_bytes: float
    kv_bytes: float
    act_bytes: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.act_bytes

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.weight_bytes + other.weight_bytes,
                    self.kv_bytes + other.kv_bytes, self.act_bytes + other.act_bytes)


ZERO_WORK = Work(0, 0, 0, 0)


def expert_touch_fraction(tokens: float, experts: int, experts_per_token: int) -> float:
    """Expected fraction of routed experts that at least one of `tokens` tokens uses.

    Assumes uniform, independent routing: each token picks `experts_per_token`
    of `experts`, so an expert is missed by one token with probability 1 - k/E.
    """
    if experts <= 0 or tokens <= 0:
        return 0.0
    return 1.0 - (1.0 - experts_per_token / experts) ** tokens


@dataclass(frozen=True, slots=True)
class Block:
    """One role of one layer in one phase.

    ``weight_params``: parameters this block must hold resident (elements).
    ``kv_elems_per_token``: KV-cache elements this block keeps per token of context.
    ``attention``: ``full``, ``sliding`` or ``mla`` for attention blocks; ``window_tokens``
    bounds the resident KV of a sliding-window layer.
    ``experts`` / ``experts_per_token``: routed experts of a MoE block.
    ``dispatches``: every aten call of the block (what per-call launch or dispatch overhead scales with).
    """

    name: str
    role: str
    phase: str
    layer: int | None
    ops: tuple[OpCost, ...] = ()
    weight_params: int = 0
    expert_params: int = 0
    kv_elems_per_token: int = 0
    attention: str | None = None
    window_tokens: int | None = None
    experts: int = 0
    experts_per_token: int = 0
    dispatches: int = 0  # aten calls an eager run of the block makes, views and mask ops included

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"block {self.name}: unknown role {self.role!r}")
        if self.phase not in PHASES:
            raise ValueError(f"block {self.name}: unknown phase {self.phase!r}")

    @property
    def flops(self) -> Poly:
        return sum((o.flops for o in self.ops), ZERO)

    def tokens(self, **point: float) -> float:
        """Tokens processed by one step: B*S in prefill, B in decode."""
        return point["B"] * point["S"] if self.phase == "prefill" else point["B"]

    def at(self, point: dict[str, float]) -> dict[str, float]:
        """The point this block's ops see: a sliding-window decode block attends to at most its window."""
        if self.window_tokens and self.phase == "decode" and point.get("L", 0) > self.window_tokens:
            return {**point, "L": self.window_tokens}
        return point

    def touched_experts(self, **point: float) -> float:
        """Fraction of this block's routed experts one step at `point` reads (1.0 for a dense block)."""
        return expert_touch_fraction(self.tokens(**point), self.experts, self.experts_per_token) \
            if self.experts else 1.0

    def work(self, precision: Precision, **point: float) -> Work:
        """Evaluate the block's cost at `point` (B and S, or B and L)."""
        touched = self.touched_experts(**point)
        point = self.at(point)
        return sum((op.work(precision, touched, **point) for op in self.ops), ZERO_WORK)

    def weight_bytes(self, precision: Precision) -> float:
        return precision.weights_bytes(self.weight_params, self.expert_params)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "role": self.role, "phase": self.phase, "layer": self.layer}
        for key in ("weight_params", "expert_params", "kv_elems_per_token", "attention",
                    "window_tokens", "experts", "experts_per_token", "dispatches"):
            value = getattr(self, key)
            if value:
                out[key] = value
        out["ops"] = [o.to_json() for o in self.ops]
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> Block:
        kwargs = {k: v for k, v in d.items() if k != "ops"}
        return Block(ops=tuple(OpCost.from_json(o) for o in d.get("ops", ())), **kwargs)


@dataclass(frozen=True, slots=True)
class Edge:
    """A tensor that crosses from block `src` to block `dst`.

    ``activation`` edges carry ``act_bytes`` per step (a `Poly`, at the traced
    activation dtype). ``kv`` edges link a prefill attention block to its decode
    twin and carry ``kv_elems_per_token`` (bytes follow from the KV dtype).
    """

    src: str
    dst: str
    kind: str
    phase: str
    act_bytes: Poly = ZERO
    kv_elems_per_token: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"src": self.src, "dst": self.dst, "kind": self.kind, "phase": self.phase}
        if self.kind == "kv":
            out["kv_elems_per_token"] = self.kv_elems_per_token
        else:
            out["act_bytes"] = self.act_bytes.to_json()
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> Edge:
        return Edge(d["src"], d["dst"], d["kind"], d["phase"],
                    act_bytes=Poly.from_json(d.get("act_bytes", [])),
                    kv_elems_per_token=int(d.get("kv_elems_per_token", 0)))


@dataclass(frozen=True, slots=True)
class UnaccountedOp:
    """An aten op that op accounting has no rule for: reported, never counted as zero silently."""

    phase: str
    block: str
    op: str
    count: int


@dataclass(frozen=True, slots=True)
class BlockGraph:
    """Blocks of both phases, the edges between them, and what the trace knew.

    ``trace`` records how the graphs were captured (tool, versions, symbolic or
    concrete shapes) so a reader can judge the numbers.
    """

    model: str
    config_sha256: str
    params_total: int
    params_active: int
    embed_params: int
    blocks: tuple[Block, ...]
    edges: tuple[Edge, ...]
    unaccounted: tuple[UnaccountedOp, ...] = ()
    trace: tuple[tuple[str, str], ...] = ()
    schema_version: int = 1
    # Derived once from `blocks` (costing asks for them millions of times): layer count, and the decode KV
    # elements per token by sliding window (None: full attention).
    layers: int = field(init=False, compare=False, repr=False)
    kv_by_window: tuple[tuple[int | None, int], ...] = field(init=False, compare=False, repr=False)
    residuals: tuple[tuple[str, Edge], ...] = field(init=False, compare=False, repr=False)  # `residual_edge`
    by_name: dict[tuple[str, str], Block] = field(init=False, compare=False, repr=False)  # `block`
    expert_params: int = field(init=False, compare=False, repr=False)  # routed-expert parameters, all layers

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", 1 + max((b.layer for b in self.blocks if b.layer is not None), default=-1))
        windows: dict[int | None, int] = {}
        for b in self.blocks:
            if b.phase == "decode" and b.kv_elems_per_token:
                windows[b.window_tokens or None] = windows.get(b.window_tokens or None, 0) + b.kv_elems_per_token
        object.__setattr__(self, "kv_by_window", tuple(windows.items()))
        object.__setattr__(self, "by_name", {(b.name, b.phase): b for b in self.blocks})
        phase = "decode" if any(b.phase == "decode" for b in self.blocks) else "prefill"
        object.__setattr__(self, "expert_params", sum(b.expert_params for b in self.blocks if b.phase == phase))
        residual: dict[str, Edge] = {}
        for e in self.edges:
            if e.kind == "activation" and e.phase not in residual and getattr(
                    self.by_name.get((e.src, e.phase)), "role", None) == "attn":
                residual[e.phase] = e
        object.__setattr__(self, "residuals", tuple(residual.items()))

    def block(self, name: str, phase: str) -> Block:
        try:
            return self.by_name[(name, phase)]
        except KeyError:
            raise KeyError(f"no block {name!r} in phase {phase!r}") from None

    def phase_blocks(self, phase: str) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.phase == phase)

    @property
    def num_layers(self) -> int:
        return self.layers

    def kv_elems_per_token(self) -> int:
        """KV elements per token of context, all layers (decode twins carry the same value)."""
        return sum(elems for _window, elems in self.kv_by_window)

    def kv_bytes_per_token(self, precision: Precision) -> float:
        return self.kv_elems_per_token() * precision.kv_bytes

    def kv_bytes_per_sequence(self, tokens: float, precision: Precision) -> float:
        """KV bytes one sequence of `tokens` tokens keeps resident (sliding layers keep at most their window).

        The one rule for a sequence's KV footprint: memory plans, pool options,
        the KV hand-off and ``inspect`` all use it.
        """
        per = sum(elems * (min(tokens, window) if window else tokens) for window, elems in self.kv_by_window)
        return per * precision.kv_bytes

    def weight_bytes(self, precision: Precision) -> float:
        return precision.weights_bytes(self.params_total, self.expert_params)

    def residual_edge(self, phase: str) -> Edge | None:
        """The residual stream one layer's attention hands its FFN: what crosses the attention/FFN seam,
        a pipeline stage boundary, or a tensor-parallel all-reduce. None if the phase has no attention block."""
        return next((e for p, e in self.residuals if p == phase), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "model": self.model,
            "config_sha256": self.config_sha256,
            "params_total": self.params_total,
            "params_active": self.params_active,
            "embed_params": self.embed_params,
            "trace": dict(self.trace),
            "blocks": [b.to_json() for b in self.blocks],
            "edges": [e.to_json() for e in self.edges],
            "unaccounted": [[u.phase, u.block, u.op, u.count] for u in self.unaccounted],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> BlockGraph:
        if d.get("schema_version") != 1:
            raise ValueError(f"BlockGraph schema_version {d.get('schema_version')!r} is not supported (expected 1)")
        return BlockGraph(
            model=d["model"], config_sha256=d["config_sha256"],
            params_total=int(d["params_total"]), params_active=int(d["params_active"]),
            embed_params=int(d["embed_params"]),
            blocks=tuple(Block.from_json(b) for b in d["blocks"]),
            edges=tuple(Edge.from_json(e) for e in d["edges"]),
            unaccounted=tuple(UnaccountedOp(*u) for u in d.get("unaccounted", ())),
            trace=tuple(sorted(d.get("trace", {}).items())),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def loads(text: str) -> BlockGraph:
        return BlockGraph.from_json(json.loads(text))

    def with_model(self, model: str) -> BlockGraph:
        return replace(self, model=model)


def merge_ops(ops: Iterable[OpCost]) -> tuple[OpCost, ...]:
    """Sum ops with the same (op, kind, expert_weights), in a stable order."""
    acc: dict[tuple[str, str, bool], OpCost] = {}
    for o in ops:
        key = (o.op, o.kind, o.expert_weights)
        acc[key] = acc[key] + o if key in acc else o
    return tuple(acc[k] for k in sorted(acc))
