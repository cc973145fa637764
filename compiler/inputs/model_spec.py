"""Resolve what the user named as a model into a `ModelSpec`.

A model is one of:

- a preset name (``llama-3.1-70b``; see `preset_names()`), shipped as a Hugging
  Face ``config.json`` under ``compiler/presets/``;
- a path to a Hugging Face ``config.json`` file, or to a model folder holding one;
- ``module:callable``: an importable callable returning either a transformers
  causal-LM model, or ``(nn.Module, example_inputs)`` where ``example_inputs`` is a
  dict of keyword tensors for one prefill step (prefill-only tracing).

Nothing here touches the network, and nothing imports torch until a model is built.

>>> spec = resolve_model("llama-3.1-8b")
>>> spec.kind, spec.name
('preset', 'llama-3.1-8b')
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compiler.ir.errors import BadInput, UnsupportedModel
from compiler.ir.precision import TORCH_DTYPES, Precision

PRESET_DIR = Path(__file__).parent / "presets"
#: Key of the gimletc-only provenance block inside a preset config.json.
PROVENANCE_KEY = "_gimletc"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A resolved model: where it came from and its canonical config text."""

    name: str
    kind: str  # "preset" | "config" | "callable"
    source: str
    config_json: str = ""  # canonical (sorted, compact) HF config, provenance removed
    callable_ref: str = ""

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json) if self.config_json else {}

    @property
    def sha256(self) -> str:
        """Identity of the model for caching: the config text, or the callable's reference."""
        return hashlib.sha256((self.config_json or self.callable_ref).encode()).hexdigest()


#: Checkpoint quantisation methods and the weight dtype they store (HF ``quantization_config.quant_method``).
QUANT_DTYPES = {"mxfp4": "fp4"}


def checkpoint_precision(spec: ModelSpec, precision: Precision) -> Precision:
    """`precision` as the model's checkpoint stores it: a checkpoint quantised to `precision`'s weight dtype that
    leaves modules unconverted (``quantization_config.modules_to_not_convert``: GPT-OSS keeps attention, router,
    embeddings and head in bf16 and stores only its routed experts in MXFP4) keeps those at its ``torch_dtype``.

    >>> gpt_oss = resolve_model("gpt-oss-120b")
    >>> checkpoint_precision(gpt_oss, Precision.of("fp4")).dense
    'bf16'
    >>> checkpoint_precision(gpt_oss, Precision.of("fp8")) == Precision.of("fp8")
    True
    """
    quant = spec.config.get("quantization_config") or {}
    if precision.dense is not None or QUANT_DTYPES.get(quant.get("quant_method")) != precision.weights \
            or not quant.get("modules_to_not_convert"):
        return precision
    stored = {name: dtype for dtype, name in TORCH_DTYPES.items()}.get(spec.config.get("torch_dtype"), "bf16")
    return replace(precision, dense=stored)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def preset_provenance(name: str) -> dict[str, Any]:
    """The ``_gimletc`` block of a preset: source URL and published parameter counts."""
    return json.loads((PRESET_DIR / f"{name}.json").read_text()).get(PROVENANCE_KEY, {})


def resolve_model(ref: str) -> ModelSpec:
    """Turn a preset name, config path or ``module:callable`` into a `ModelSpec`."""
    ref = ref.strip()
    if not ref:
        raise BadInput("model: empty name; give a preset (see `gimletc inspect --list`), a config.json path or module:callable")
    path = Path(ref)
    looks_like_path = path.suffix == ".json" or "/" in ref or path.exists()
    if ":" in ref and not looks_like_path:
        return ModelSpec(name=ref, kind="callable", source=ref, callable_ref=ref)
    if looks_like_path:
        return _from_config_path(ref, path)
    preset = PRESET_DIR / f"{ref}.json"
    if preset.is_file():
        return ModelSpec(name=ref, kind="preset", source=str(preset), config_json=_canonical(_read_json(preset, ref)))
    close = difflib.get_close_matches(ref, preset_names(), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BadInput(
        f"model {ref!r}: no such preset and no such file; {hint}"
        f"give a preset name (`gimletc inspect --list`), a path to a config.json, or module:callable"
    )


def _from_config_path(ref: str, path: Path) -> ModelSpec:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise BadInput(f"model {ref!r}: file {path} not found; give a Hugging Face config.json or a folder holding one")
    config = _read_json(path, ref)
    name = config.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem)
    return ModelSpec(name=str(name), kind="config", source=str(path), config_json=_canonical(config))


def _read_json(path: Path, ref: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BadInput(f"model {ref!r}: {path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); fix the file") from None
    except OSError as e:
        raise BadInput(f"model {ref!r}: cannot read {path} ({e.strerror}); check the path and permissions") from None
    if not isinstance(data, dict):
        raise BadInput(f"model {ref!r}: {path} must hold a JSON object (a Hugging Face config), not {type(data).__name__}")
    if "model_type" not in data:
        raise BadInput(f"model {ref!r}: {path} has no 'model_type' field; it does not look like a Hugging Face config.json")
    return data


def _canonical(config: dict[str, Any]) -> str:
    config = {k: v for k, v in config.items() if k != PROVENANCE_KEY}
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def load_hf_config(spec: ModelSpec):
    """The transformers config object for a config-based spec (imports transformers)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = spec.config
    model_type = config["model_type"]
    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnsupportedModel(
            f"model {spec.name!r}: model_type {model_type!r} in {spec.source} is not an architecture "
            f"transformers knows{hint}; fix model_type or pass module:callable building the model"
        )
    try:
        return CONFIG_MAPPING[model_type].from_dict(config)
    except (TypeError, ValueError, KeyError) as e:
        raise BadInput(f"model {spec.name!r}: {spec.source} is not a valid {model_type} config ({e}); fix the field named") from None


def import_callable(spec: ModelSpec):
    """Import the object named by ``module:callable``."""
    module_name, _, attr = spec.callable_ref.partition(":")
    if not module_name or not attr:
        raise BadInput(f"model {spec.source!r}: expected module:callable, e.g. mypkg.models:build")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # an import can fail in any way; report it, don't crash
        raise BadInput(f"model {spec.source!r}: cannot import module {module_name!r} ({type(e).__name__}: {e}); "
                       f"check the name and that it is on PYTHONPATH") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise BadInput(f"model {spec.source!r}: module {module_name!r} has no attribute {attr!r}; check the callable's name")
        obj = getattr(obj, part)
    if not callable(obj):
        raise BadInput(f"model {spec.source!r}: {attr!r} in {module_name!r} is not callable")
    return obj
