"""Hugging Face's own layer modules, run on flat tokens with the runtime's attention.

Stage programs of the families without a hand-written template (see [Note: stage
programs are generated from block templates] in compiler/emit/stage_programs.py)
call the model's submodules by their state-dict path (``model.layers.0.self_attn``),
so each architecture's layer code has one home, transformers. `HFModules` builds
the model's skeleton once on the meta device, takes the submodule a program
names and assigns it the tensors of the program's shard (no copy, nothing
initialised). Attention modules run with the ``gimletc`` attention function
registered in transformers' `AttentionInterface`: it hands q, k, v (after the
module's own projections, norms and RoPE) to the ``attend`` callable the caller
passes (the paged KV cache), with the module's scale, logit soft-cap, sliding
window and attention sinks. Tokens are flat, (1, N, hidden): one prompt or a
ragged decode batch; the cache separates the requests.

>>> ATTENTION  # the name transformers dispatches on
'gimletc'
"""

from __future__ import annotations

from typing import Any

from compiler.ir.errors import RuntimeFailure

ATTENTION = "gimletc"
_REGISTERED = False


def _paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract: q (1, heads, N, d), k / v (1, kv heads, N, d_k / d_v) ->
    ((1, N, heads, d_v), None). A value head narrower than the key head (MLA) is zero-padded to the key's width
    so the cache keeps one head size, and the padding is cut off the output."""
    import torch.nn.functional as F

    attend = kwargs.get("gimletc_attend")
    if attend is None:
        raise RuntimeFailure("a gimletc attention module was called without the runtime's attend callable")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    d_v = v.shape[-1]
    if d_v < k.shape[-1]:
        v = F.pad(v, (0, k.shape[-1] - d_v))
    out = attend(module.layer_idx, q, k, v, scale=scaling, softcap=kwargs.get("softcap"),
                 window=kwargs.get("sliding_window"), sinks=kwargs.get("s_aux"))
    return out[..., :d_v][None], None


def register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTENTION, _paged_attention)
        _REGISTERED = True


class HFModules:
    """The submodules of one model config, materialised from a stage's weight shard on first use."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self._model = None
        self._rotary = None
        self._taken: dict[str, Any] = {}
        self._stash: dict[int, Any] = {}  # layer -> its input, for parallel-residual FFNs

    def skeleton(self):
        if self._model is None:
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM

            register()
            cfg = AutoConfig.for_model(**{k: v for k, v in self.config.items() if k != "_gimletc"})
            with torch.device("meta"):
                self._model = AutoModelForCausalLM.from_config(cfg, attn_implementation=ATTENTION).eval()
        return self._model

    def module(self, w: dict[str, Any], path: str):
        """The submodule at `path`, its parameters and buffers the shard's ``path.*`` tensors."""
        found = self._taken.get(path)
        if found is None:
            found = self.skeleton().get_submodule(path)
            prefix = path + "."
            found.load_state_dict({k[len(prefix):]: t for k, t in w.items() if k.startswith(prefix)}, strict=True,
                                  assign=True)
            self._constant_buffers(found)
            left = [n for n, t in [*found.named_parameters(), *found.named_buffers()] if t.is_meta]
            if left:
                raise RuntimeFailure(f"stage program: {path} has tensors the shard does not hold ({', '.join(left)})")
            self._taken[path] = found
        return found

    @staticmethod
    def _constant_buffers(module) -> None:
        """Non-persistent buffers holding a constant the module also keeps as ``scalar_NAME`` (Gemma's
        ``embed_scale``): not in any checkpoint, so filled from that constant."""
        import torch

        for sub in module.modules():
            for name, buf in list(sub.named_buffers(recurse=False)):
                if buf.is_meta and hasattr(sub, f"scalar_{name}"):
                    setattr(sub, name, torch.tensor(getattr(sub, f"scalar_{name}"), dtype=buf.dtype))

    def rope(self, positions, dtype):
        """(cos, sin) of each token's position as the model's own rotary embedding computes them, (1, N, d)."""
        import torch

        if self._rotary is None:
            meta = next(m for n, m in self.skeleton().named_modules() if type(m).__name__.endswith("RotaryEmbedding"))
            self._rotary = type(meta)(config=self.skeleton().config)
        return self._rotary(torch.empty(0, dtype=dtype), positions[None])

    def attention(self, w, path: str, h, cos, sin, attend):
        pe = None if cos is None else (cos, sin)
        out = self.module(w, path)(hidden_states=h[None], position_embeddings=pe, attention_mask=None,
                                   gimletc_attend=attend)
        return out[0][0]

    def mlp(self, w, path: str, h):
        out = self.module(w, path)(h[None])
        return (out[0] if isinstance(out, tuple) else out)[0]

    def stash(self, layer: int, x):
        self._stash[layer] = x
        return x

    def stashed(self, layer: int):
        return self._stash.pop(layer)

