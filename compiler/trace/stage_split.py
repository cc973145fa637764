"""Split a traced phase into one executable piece per block.

Before: an `ExportedProgram` of one phase (traced with real weights, unfolded).
After: a `torch.fx.GraphModule` whose submodules ``b{k}_{block}`` are the blocks
in execution order, each holding its own weights; the top-level graph only
passes tensors from piece to piece. Running it runs the blocks in sequence;
the runtime will place the same pieces on different devices.

The node-to-block rule is the partition's (`compiler.trace.ownership.assign_blocks`),
so the pieces that run are exactly the blocks whose costs are reported.
Per FIELD_NOTES.md: the export guard node is removed first, glue nodes follow
their producer, and each piece's weights are moved into it.
"""

from __future__ import annotations

from typing import Any

from compiler.trace.ownership import assign_blocks, block_name, block_order, is_routed_expert


def split_model(model_name: str, *, seed: int = 0) -> tuple[Any, Any, Any]:
    """Build `model_name` with seeded fp32 weights on the CPU and split both phases.

    Returns ``(model, prefill, decode)``: the Hugging Face model and the split
    GraphModules. Decode keeps every token of sliding-window layers (the mask
    applies the window), so one graph serves every context length.
    """
    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import build_model, quiet_export_logs, trace

    spec = resolve_model(model_name)
    model, _ = build_model(spec, device="cpu", dtype="fp32", seed=seed)
    with quiet_export_logs():
        traced = trace(spec, model=model, fold=False, sliding_kv="full")
    return model, split_stages(traced.phases["prefill"].program), split_stages(traced.phases["decode"].program)


def split_stages(program) -> Any:
    """Return the split GraphModule; its call signature is the flattened user inputs."""
    from torch.fx.passes.split_module import split_module

    gm = program.module()
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and "_guards" in str(node.target):
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    owner = assign_blocks(gm)
    moe_layers = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr" and is_routed_expert(node.target):
            moe_layers |= {owner[u.name][1] for u in node.users if u.name in owner and owner[u.name][1] is not None}
    ids = sorted({block_order(*k) for k in owner.values()})
    index = {o: i for i, o in enumerate(ids)}
    names = {block_order(*k): block_name(k[0], k[1], "moe" if k[1] in moe_layers else "ffn") for k in owner.values()}

    def which(node) -> int:
        if node.name in owner:
            return index[block_order(*owner[node.name])]
        users = [u for u in node.users if u.name in owner]  # get_attr: the piece that uses the weight
        return index[block_order(*owner[users[0].name])] if users else 0

    split = split_module(gm, gm, which, keep_original_order=True)
    for node in split.graph.nodes:
        if node.op == "call_module" and node.target.startswith("submod_"):
            node.meta["block"] = names[ids[int(node.target.split("_")[1])]]
    _move_weights_in(split)
    return split


def _move_weights_in(split) -> None:
    """Turn weights that split_module passed as piece inputs into the piece's own attributes."""
    import torch

    for node in list(split.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("submod_"):
            continue
        piece = getattr(split, node.target)
        placeholders = [p for p in piece.graph.nodes if p.op == "placeholder"]
        keep_args = []
        for arg, ph in zip(node.args, placeholders):
            if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
                value = _fetch(split, arg.target)
                attr = ph.name
                if isinstance(value, torch.nn.Parameter):
                    piece.register_parameter(attr, value)
                else:
                    piece.register_buffer(attr, value)
                with piece.graph.inserting_before(ph):
                    got = piece.graph.get_attr(attr)
                ph.replace_all_uses_with(got)
                piece.graph.erase_node(ph)
            else:
                keep_args.append(arg)
        node.args = tuple(keep_args)
        piece.graph.lint()
        piece.recompile()
    for node in list(split.graph.nodes):
        if node.op == "get_attr" and not node.users:
            split.graph.erase_node(node)
    split.graph.lint()
    split.recompile()


def _fetch(module, target: str):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
