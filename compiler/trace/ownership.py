"""Which block owns each node of a traced graph: the one rule partition and stage split share.

Before: an fx graph of one phase (an `ExportedProgram`'s or a `GraphModule`'s).
After: a map from each ``call_function`` node's name to its ``(role, layer)``;
`block_name` and `block_order` turn those into ``embed`` / ``L{i}.attn`` /
``L{i}.ffn`` / ``L{i}.moe`` / ``head`` and an execution order.

[Note: which block owns a node]
1. A node whose module path (``nn_module_stack``) lies inside a decoder layer
   goes to that layer's attention block when the path names attention or the
   layer's input norm (``self_attn``, ``input_layernorm``, ...), and to its FFN
   block when it names the MLP, MoE or the post-attention norm (``mlp``,
   ``post_attention_layernorm``, ``experts``, ...). Pre-norms therefore travel
   with the block they feed.
2. ``embed_tokens`` goes to ``embed``; the final norm and ``lm_head`` to ``head``.
3. Every other node (residual adds, tagged only with their layer; RoPE tables and
   masks at model level) goes to the latest block among its producers, so a
   residual add belongs to the block whose output it adds. A node with no
   producer in any block (position ids, masks, RoPE tables) goes to ``embed``.
   Such position-only tensors depend on no weight or cache: every stage can
   recompute them, so they are not charged as edges.
An FFN block whose nodes use routed experts (`is_routed_expert`) is named ``L{i}.moe``.
"""

from __future__ import annotations

import re

from compiler.ir.errors import UnsupportedModel

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.([A-Za-z_]\w*))?")
_ATTN_WORDS = ("attn", "attention", "input_layernorm", "ln_1", "q_norm", "k_norm")
_FFN_WORDS = ("mlp", "moe", "feed_forward", "ffn", "experts", "post_attention_layernorm", "ln_2",
              "pre_feedforward_layernorm", "post_feedforward_layernorm", "router", "gate")
_EMBED_WORDS = ("embed_tokens", "wte", "word_embeddings", "tok_embeddings")
_HEAD_WORDS = ("lm_head", "norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm", "output", "embed_out")


def is_routed_expert(fqn: str) -> bool:
    """Whether a parameter's fully qualified name belongs to a routed expert (shared experts are not routed).

    >>> is_routed_expert("model.layers.3.mlp.experts.gate_up_proj"), is_routed_expert("model.layers.3.mlp.gate")
    (True, False)
    """
    return ".experts." in f".{fqn}"


def module_path(node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    return list(stack.values())[-1][0]


def _role_of_path(path: str, sandwich: bool = False) -> tuple[str, int | None] | None:
    """(role, layer) a module path names, or None for glue. See [Note: which block owns a node]."""
    m = _LAYER_RE.search(path)
    if m:
        layer, child = int(m.group(1)), m.group(2) or ""
        if sandwich and child.startswith("post_attention_layernorm"):
            return "attn", layer
        if any(w in child for w in _FFN_WORDS):  # first: "post_attention_layernorm" names attention
            return "ffn", layer
        if any(w in child for w in _ATTN_WORDS):
            return "attn", layer
        return None
    last = path.rsplit(".", 1)[-1]
    if any(w == last or last.startswith(w) for w in _EMBED_WORDS):
        return "embed", None
    if last in _HEAD_WORDS:
        return "head", None
    return None


def block_order(role: str, layer: int | None) -> int:
    if role == "embed":
        return 0
    if role == "head":
        return 1 << 30
    return 1 + 2 * layer + (0 if role == "attn" else 1)


def assign_blocks(program) -> dict[str, tuple[str, int | None]]:
    """Map each call_function node name of `program` to its (role, layer). See [Note: which block owns a node]."""
    owner: dict[str, tuple[str, int | None]] = {}
    # Gemma-2 style layers norm the attention output ("post_attention_layernorm") and have their own pre-FFN
    # norm: there the post-attention norm belongs to attention, not to the FFN it precedes in Llama.
    sandwich = any("pre_feedforward_layernorm" in module_path(n) for n in program.graph.nodes if n.op == "call_function")
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        found = _role_of_path(module_path(node), sandwich)
        if found is None:
            producers = [owner[a.name] for a in node.all_input_nodes if a.name in owner]
            found = max(producers, key=lambda k: block_order(*k)) if producers else ("embed", None)
        owner[node.name] = found
    _check_monotone(program, owner)
    return owner


def _check_monotone(program, owner) -> None:
    for node in program.graph.nodes:
        if node.name not in owner:
            continue
        for user in node.users:
            if user.name in owner and block_order(*owner[user.name]) < block_order(*owner[node.name]):
                raise UnsupportedModel(
                    f"node {user.name} ({module_path(user)}) in {block_name(*owner[user.name], 'ffn')} reads "
                    f"{node.name} from the later block {block_name(*owner[node.name], 'ffn')}; the model's layers "
                    f"are not sequential, which partitioning does not support yet")


def block_name(role: str, layer: int | None, ffn_name: str) -> str:
    if layer is None:
        return role
    return f"L{layer}.{'attn' if role == 'attn' else ffn_name}"
