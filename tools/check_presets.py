#!/usr/bin/env python
"""Check every Hugging Face-format preset in compiler/inputs/presets/.

For each ``<preset>.json`` the config is loaded exactly the way gimletc loads it
(``_gimletc`` popped, ``CONFIG_MAPPING[model_type].from_dict``, model built on the
meta device in bfloat16 with ``AutoModelForCausalLM.from_config``) and:

* the parameter count is compared with ``_gimletc.params_total_published``: a
  full-size preset fails when it is off by more than 1% (2% for gpt-oss); a tiny
  test variant must match its recorded count exactly;
* the active parameter count (routed experts scaled by top-k / n_experts) is
  reported next to ``_gimletc.params_active_published`` (informational);
* RoPE scaling written as ``rope_scaling`` in the file must survive loading into
  ``cfg.rope_parameters`` (same rope_type, same values, same rope_theta) and reach
  the model's rotary embedding;
* ``layer_types`` / ``sliding_window`` in the file must survive loading and reach
  the attention layers (gpt-oss: window on sliding layers only, sinks present);
* DeepSeek-V3: the first ``first_k_dense_replace`` layers are dense, the rest MoE
  with shared experts;
* tiny variants (``_gimletc.source`` starting with "tiny test variant") are also
  run forward on CPU in float32 (seed 0, input_ids of shape (2, 12)).

Usage: python tools/check_presets.py [--no-forward] [--verbose] [PRESET ...]
Exits non-zero when any check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

REPO = Path(__file__).resolve().parent.parent
PRESET_DIR = REPO / "compiler" / "inputs" / "presets"
TINY_PREFIX = "tiny test variant"
TOL_DEFAULT = 0.01
TOL_BY_MODEL_TYPE = {"gpt_oss": 0.02}


def load_config(path: Path):
    """The exact loading path gimletc uses. Returns (raw dict incl. _gimletc, config)."""
    raw = json.load(open(path))
    d = dict(raw)
    d.pop("_gimletc", None)
    cfg = CONFIG_MAPPING[d["model_type"]].from_dict(d)
    return raw, cfg


def build(cfg, dtype, device):
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype)


def n_experts(cfg):
    for name in ("num_local_experts", "n_routed_experts", "num_experts"):
        v = getattr(cfg, name, None)
        if v:
            return int(v)
    return None


def active_params(model, cfg, total: int) -> int:
    """Total minus the routed-expert weights a token does not use (top-k of E)."""
    E, k = n_experts(cfg), getattr(cfg, "num_experts_per_tok", None)
    if not E or not k:
        return total
    inactive = 0
    for name, mod in model.named_modules():
        if name.split(".")[-1] == "experts":  # routed experts only; not shared_experts
            n = sum(p.numel() for p in mod.parameters())
            inactive += n * (E - k) // E
    return total - inactive


def check_rope(raw: dict, cfg, model, errors: list[str]) -> str:
    rp = getattr(cfg, "rope_parameters", None) or {}
    if "layer_types" in rp or any(isinstance(v, dict) for v in rp.values()):
        errors.append(f"rope_parameters unexpectedly nested: {rp}")
        return "?"
    got_type = rp.get("rope_type")
    scaling = raw.get("rope_scaling")
    want_type = "default"
    if scaling:
        want_type = scaling.get("rope_type", scaling.get("type"))
        for key, val in scaling.items():
            if key == "type":
                continue
            if key not in rp or rp[key] != val:
                errors.append(f"rope_scaling[{key!r}]={val!r} lost: rope_parameters has {rp.get(key)!r}")
    if got_type != want_type:
        errors.append(f"rope_type {got_type!r} != {want_type!r} from file")
    if "rope_theta" in raw and rp.get("rope_theta") != raw["rope_theta"]:
        errors.append(f"rope_theta {rp.get('rope_theta')!r} != {raw['rope_theta']!r} from file")
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None and getattr(rotary, "rope_type", got_type) != want_type:
        errors.append(f"model rotary_emb.rope_type {rotary.rope_type!r} != {want_type!r}")
    return str(got_type)


def check_layout(raw: dict, cfg, model, errors: list[str]) -> str:
    layers = model.model.layers
    if len(layers) != raw["num_hidden_layers"]:
        errors.append(f"built {len(layers)} layers, file says {raw['num_hidden_layers']}")
    if "layer_types" in raw and list(getattr(cfg, "layer_types", None) or []) != raw["layer_types"]:
        errors.append("layer_types did not survive loading")
    notes = []
    mt = raw["model_type"]
    if mt == "gpt_oss":
        if cfg.sliding_window != raw["sliding_window"]:
            errors.append(f"sliding_window {cfg.sliding_window!r} != {raw['sliding_window']!r}")
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            want = raw["sliding_window"] if cfg.layer_types[i] == "sliding_attention" else None
            if getattr(attn, "sliding_window", "missing") != want:
                errors.append(f"layer {i} attention window {getattr(attn, 'sliding_window', None)!r} != {want!r}")
            if getattr(attn, "sinks", None) is None:
                errors.append(f"layer {i} has no attention sinks")
        n_sw = sum(t == "sliding_attention" for t in cfg.layer_types)
        notes.append(f"{n_sw} sliding(w={cfg.sliding_window})+{len(layers) - n_sw} full, sinks")
    if mt in ("qwen3", "qwen3_moe"):
        attn = layers[0].self_attn
        if not (hasattr(attn, "q_norm") and hasattr(attn, "k_norm")):
            errors.append("qwen3 attention lacks q_norm/k_norm")
        notes.append("qk-norm")
    if mt == "deepseek_v3":
        k = cfg.first_k_dense_replace
        kinds = ["moe" if hasattr(layer.mlp, "gate") and hasattr(layer.mlp, "experts") else "dense" for layer in layers]
        if kinds[:k] != ["dense"] * k or any(x != "dense" for x in kinds[:k]) or any(x != "moe" for x in kinds[k:]):
            errors.append(f"dense/MoE layer pattern {kinds} does not match first_k_dense_replace={k}")
        if k < len(layers) and not hasattr(layers[k].mlp, "shared_experts"):
            errors.append("DeepSeek MoE layer lacks shared_experts")
        notes.append(f"MLA, {k} dense + {len(layers) - k} MoE, groups {cfg.n_group}/top {cfg.topk_group}")
    E = n_experts(cfg)
    if E:
        notes.insert(0, f"{E}e top{cfg.num_experts_per_tok}")
    if mt != "deepseek_v3":  # MLA: kv heads are not a GQA grouping
        h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
        notes.insert(0, f"GQA {h}/{kv}" if kv != h else f"MHA {h}")
    return ", ".join(notes)


def run_forward(cfg, errors: list[str]) -> str:
    torch.manual_seed(0)
    model = build(cfg, torch.float32, "cpu").eval()
    input_ids = torch.randint(0, cfg.vocab_size, (2, 12))
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    if tuple(logits.shape) != (2, 12, cfg.vocab_size):
        errors.append(f"forward logits shape {tuple(logits.shape)}")
    if not torch.isfinite(logits).all():
        errors.append("forward produced non-finite logits")
    return f"fwd ok {tuple(logits.shape)} |x|max={logits.abs().max().item():.3g}"


def fmt_b(n) -> str:
    if n is None:
        return "-"
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{int(n):,}"


def check_preset(path: Path, forward: bool) -> tuple[tuple[str, ...], tuple, list[str]]:
    """One preset: its table row, its details line's parts, and the checks it failed."""
    name = path.stem
    errors: list[str] = []
    raw, cfg = load_config(path)
    meta = raw.get("_gimletc") or {}
    tiny = str(meta.get("source", "")).startswith(TINY_PREFIX)
    model = build(cfg, torch.bfloat16, "meta")
    total = sum(p.numel() for p in model.parameters())
    active = active_params(model, cfg, total)
    pub = meta.get("params_total_published")
    pub_active = meta.get("params_active_published")
    if pub is None:
        errors.append("_gimletc.params_total_published missing")
        err = math.nan
    else:
        err = (total - pub) / pub * 100
        if tiny:
            if total != pub:
                errors.append(f"tiny variant count {total} != recorded {pub}")
        else:
            tol = TOL_BY_MODEL_TYPE.get(raw["model_type"], TOL_DEFAULT)
            if abs(err) > tol * 100:
                errors.append(f"params {total} off published {pub:g} by {err:+.2f}% (> {tol:.0%})")
    act_err = (active - pub_active) / pub_active * 100 if pub_active else math.nan
    rope_type = check_rope(raw, cfg, model, errors)
    layout = check_layout(raw, cfg, model, errors)
    fwd = ""
    if tiny and forward:
        try:
            fwd = run_forward(cfg, errors)
        except Exception as exc:  # report, don't stop the sweep
            errors.append(f"forward failed: {type(exc).__name__}: {exc}")
    cls_name = type(model).__name__
    del model
    status = "FAIL" if errors else "ok"
    row = (name, cls_name, str(cfg.num_hidden_layers), fmt_b(total), fmt_b(pub), f"{err:+.3f}%",
           fmt_b(active), fmt_b(pub_active), f"{act_err:+.1f}%" if not math.isnan(act_err) else "-",
           rope_type, status)
    return row, (name, cfg.rope_parameters, layout, fwd), errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", help="preset names (default: all in compiler/inputs/presets)")
    ap.add_argument("--no-forward", action="store_true", help="skip the CPU forward of tiny variants")
    ap.add_argument("--verbose", "-v", action="store_true", help="print rope_parameters for every preset")
    args = ap.parse_args(argv)

    paths = sorted(PRESET_DIR.glob("*.json"))
    if args.presets:
        wanted = set(args.presets)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            print(f"unknown presets: {sorted(missing)}", file=sys.stderr)
            return 2
    if not paths:
        print(f"no presets found in {PRESET_DIR}", file=sys.stderr)
        return 2

    rows, failures, details = [], [], []
    for path in paths:
        row, detail, errors = check_preset(path, not args.no_forward)
        rows.append(row)
        details.append(detail)
        for e in errors:
            failures.append(f"{row[0]}: {e}")

    header = ("preset", "class", "layers", "params_total", "published", "% error",
              "active", "active_pub", "% act", "rope", "status")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    for name, rp, layout, fwd in details:
        extra = "; ".join(x for x in (layout, fwd) if x)
        print(f"{name}: {extra}" if extra else f"{name}:")
        if args.verbose:
            print(f"    rope_parameters={rp}")
    print("\nactive = total minus the routed-expert weights a token skips (informational, not checked);"
          "\npublished active figures differ in what they count, e.g. OpenAI's 5.13B for gpt-oss-120b"
          "\nleaves out the 0.58B embedding table, DeepSeek's 37B is rounded.")
    if failures:
        print(f"\n{len(failures)} check(s) failed:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print(f"\nall {len(rows)} presets ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
