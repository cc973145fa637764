"""Weights for a runnable plan: the reference model, ``DIR/model/``, and one safetensors shard per stage rank.

Before: a model spec (preset, config file or folder) and optionally a local
Hugging Face checkpoint folder (``--weights DIR``). After:

- `reference_model`: the Hugging Face model in fp32, either initialised from the
  config with a fixed seed (the same seed gives the same bytes) or loaded from
  the checkpoint folder (``local_files_only``: nothing touches the network);
- `write_model_dir`: ``DIR/model/`` holds ``config.json`` and the weights in
  Hugging Face safetensors layout (seeded weights), or ``config.json`` and
  ``reference.json`` naming the checkpoint folder and its files' sha256;
- `cut_shard`: the tensors a stage program names (`compiler.emit.stage_programs.WeightRef`),
  sliced for its tensor-parallel rank and cast to the run dtype.

Nothing here unpickles: checkpoints are read through safetensors by transformers.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

from compiler.ir.errors import BadInput
from compiler.ir.precision import TORCH_DTYPES


def reference_model(model: str, *, weights_dir: str | None = None, seed: int = 0):
    """The Hugging Face model in fp32: seeded from `model`'s config, or loaded from `weights_dir`."""
    import torch

    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import build_model

    if weights_dir is None:
        built, _ = build_model(resolve_model(model), device="cpu", dtype="fp32", seed=seed)
        return built
    from transformers import AutoModelForCausalLM

    folder = Path(weights_dir)
    if not (folder / "config.json").is_file() or not list(folder.glob("*.safetensors")):
        raise BadInput(f"--weights {weights_dir}: expected a Hugging Face checkpoint folder with config.json and "
                       f"*.safetensors (as save_pretrained writes); convert .bin checkpoints to safetensors first")
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    return loaded.eval()


def check_same_shape(config: dict[str, Any], checkpoint: dict[str, Any], weights_dir: str) -> None:
    """Refuse a checkpoint whose dimensions differ from the model the plan was compiled for."""
    keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "num_local_experts")
    diff = [f"{k} {checkpoint.get(k)!r} vs {config.get(k)!r}" for k in keys if checkpoint.get(k) != config.get(k)]
    if diff:
        raise BadInput(f"--weights {weights_dir}: config.json differs from the compiled model ({'; '.join(diff)}); "
                       f"compile the checkpoint folder itself (gimletc compile {weights_dir} ...)")


def rope_of(config_obj) -> tuple[Any, float]:
    """(inv_freq, attention scaling) exactly as the model's own rotary-embedding class computes them; (None, 1.0)
    for a family without RoPE (GPT-2's learned positions)."""
    module = importlib.import_module(type(config_obj).__module__.replace("configuration_", "modeling_"))
    cls = next((getattr(module, n) for n in sorted(dir(module)) if n.endswith("RotaryEmbedding")), None)
    if cls is None:
        return None, 1.0
    rotary = cls(config=config_obj)
    return rotary.inv_freq.detach().clone().float(), float(getattr(rotary, "attention_scaling", 1.0))


def write_model_dir(model, out: Path, weights_dir: str | None) -> list[Path]:
    """Write ``out`` (``DIR/model``); return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    if weights_dir is None:
        from transformers.utils import logging as hf_logging

        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # its "Writing model shards" bar is not ours to print (the CLI owns stderr)
        try:
            model.save_pretrained(str(out), safe_serialization=True)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        return sorted(p for p in out.iterdir() if p.is_file())
    folder = Path(weights_dir).resolve()
    (out / "config.json").write_bytes((folder / "config.json").read_bytes())
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}
    ref = {"checkpoint": str(folder), "safetensors_sha256": files,
           "note": "weights were sliced from this local checkpoint folder; it is not copied"}
    (out / "reference.json").write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    return [out / "config.json", out / "reference.json"]


def cut_shard(state: dict[str, Any], refs, dtype: str) -> dict[str, Any]:
    """The shard: each ref's source tensor, sliced, contiguous, cast to `dtype` (inv_freq stays fp32)."""
    import torch

    out = {}
    for name, ref in refs:
        if ref.source not in state:
            raise BadInput(f"weights: the model has no tensor {ref.source!r} (needed by {name}); the checkpoint "
                           f"does not match the stage programs' model family")
        t = state[ref.source]
        if ref.dim is not None:
            t = t.narrow(ref.dim, ref.lo, ref.hi - ref.lo)
        keep_fp32 = name == "rope.inv_freq"
        out[name] = t.detach().to(torch.float32 if keep_fp32 else getattr(torch, TORCH_DTYPES[dtype])).contiguous().clone()
    return out


def save_shard(path: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    # One metadata key: safetensors writes them from a hash map whose order changes from process to process, so
    # two keys made the same shard differ in bytes between runs (and between a compile and its background child).
    save_file(tensors, str(path), metadata={"format": "pt"})


def load_shard(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path))

