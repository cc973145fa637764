"""ONNX export of each stage program (one file per stage rank), checked with ``onnx.checker``.

Before: a stage program's source and its weight shard. After: ``.onnx`` files
whose graph is the stage's blocks in prefill form: one prompt of N tokens
(dynamic), positions 0..N-1 as an input, dense causal attention in place of the
paged cache. Inputs are ``ids`` (int64, N) when the stage starts with ``embed``,
else ``x`` (float, N x hidden), and ``positions`` (int64, N); the output is the
stage's last block output (logits for a stage ending in ``head``).

Export runs in fp32 (ONNX Runtime on CPU has no bf16 MatMul; FIELD_NOTES.md), weights embedded in the file.

[Note: which ONNX exporter] A stage program is plain tensor code (no Hugging Face module, no cache object), which
torch's TorchScript-based exporter (``dynamo=False``, opset 18, the token dimension dynamic through
``dynamic_axes``) turns into ONNX in about 0.6 s, where the torch.export-based one (``dynamo=True``) takes 3 to 6 s
whatever the stage's size (export, decompositions, the optimizer: a fixed cost that made a tiny plan's write pass
most of its compile). The TorchScript exporter is deprecated since torch 2.9 but present in the pinned torch; where
it fails (or is gone), the torch.export-based exporter writes the file. Both pass ``onnx.checker`` and match the
torch stage in ONNX Runtime at another length than the export's (tests/runtime/test_onnx.py).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

#: The opset of the TorchScript-based export ([Note: which ONNX exporter]); the torch.export-based one picks its own.
LEGACY_OPSET = 18


def program_namespace(source: str, filename: str) -> dict[str, Any]:
    """Execute generated program text (already hash-checked or just generated) into a fresh namespace."""
    namespace: dict[str, Any] = {"__name__": f"gimletc_stage:{filename}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated, hash-verified code
    return namespace


def dense_attend(layer: int, q, k, v):
    """Causal attention over one prompt: q (N, nq, d), k and v (N, nkv, d) -> (N, nq, d)."""
    import torch
    import torch.nn.functional as F

    groups = q.shape[1] // k.shape[1]
    k = torch.repeat_interleave(k, groups, dim=1)
    v = torch.repeat_interleave(v, groups, dim=1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         is_causal=True)
    return out[0].transpose(0, 1)


def stage_module(source: str, weights: dict[str, Any], filename: str = "stage.py"):
    """An ``nn.Module`` running the program's blocks in prefill form (what is exported and what ORT is checked against)."""
    import torch

    namespace = program_namespace(source, filename)

    class Stage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.names = sorted(weights)
            for i, name in enumerate(self.names):
                self.register_buffer(f"w{i}", weights[name])

        def forward(self, first, positions):
            w = {name: getattr(self, f"w{i}") for i, name in enumerate(self.names)}
            x = first
            cos = sin = None
            for block, fn in namespace["BLOCKS"].items():
                if block == "embed":
                    x = fn(w, x, positions)
                elif block.endswith(".attn"):
                    if cos is None:
                        cos, sin = namespace["rope_tables"](w, positions, x.dtype)
                    x = fn(w, x, cos, sin, dense_attend)
                else:
                    x = fn(w, x)
            return x

    return Stage().eval(), list(namespace["BLOCKS"])


def example_inputs(blocks: list[str], hidden: int, tokens: int = 7, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, 8, (tokens,), generator=g) if blocks and blocks[0] == "embed" else \
        torch.randn(tokens, hidden, generator=g)
    return first, torch.arange(tokens)


def _with_inputs(proto, names: list[str], examples):
    """`proto` with every input of `names`, in order: the TorchScript exporter drops an input the graph does not
    read (``positions`` of a stage without attention), which every stage file takes."""
    import onnx

    present = {i.name for i in proto.graph.input}
    for i, (name, example) in enumerate(zip(names, examples)):
        if name not in present:
            kind = onnx.TensorProto.INT64 if example.dtype.is_floating_point is False else onnx.TensorProto.FLOAT
            shape = ["tokens", *example.shape[1:]]
            proto.graph.input.insert(i, onnx.helper.make_tensor_value_info(name, kind, shape))
    return proto


def export_stage(source: str, weights: dict[str, Any], hidden: int, path: Path) -> None:
    """Write and check one stage's ONNX file."""
    import onnx
    import torch
    from torch.export import Dim

    module, blocks = stage_module(source, weights, path.stem)
    first, positions = example_inputs(blocks, hidden)
    n = Dim("tokens", min=2, max=4096)
    shapes = ({0: n}, {0: n})
    path.parent.mkdir(parents=True, exist_ok=True)
    import logging
    import warnings

    from compiler.trace.export import quiet_export_logs

    names = ["ids" if blocks[:1] == ["embed"] else "x", "positions"]
    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    onnx_log.setLevel(logging.ERROR)
    proto = None
    with quiet_export_logs(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # [Note: which ONNX exporter]
            buffer = io.BytesIO()
            torch.onnx.export(module, (first, positions), buffer, dynamo=False, opset_version=LEGACY_OPSET,
                              input_names=names, output_names=["out"],
                              dynamic_axes={names[0]: {0: "tokens"}, "positions": {0: "tokens"}})
            proto = _with_inputs(onnx.load_from_string(buffer.getvalue()), names, (first, positions))
            onnx.checker.check_model(proto, full_check=True)
        except Exception as e:  # noqa: BLE001 - any failure of the fast path: the torch.export-based exporter
            logging.getLogger(__name__).debug("TorchScript ONNX export of %s failed (%s); using torch.export", path, e)
            proto = None
        if proto is None:
            program = torch.onnx.export(module, (first, positions), dynamo=True, dynamic_shapes=shapes,
                                        input_names=names, output_names=["out"], verbose=False, optimize=True)
            proto = program.model_proto
            onnx.checker.check_model(proto, full_check=True)
    onnx_log.setLevel(level)
    path.write_bytes(proto.SerializeToString(deterministic=True))
