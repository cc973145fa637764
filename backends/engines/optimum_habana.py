"""Optimum-Habana: Hugging Face's library for Gaudi, whose text-generation example ran the static batches of
Intel's Gaudi model-performance tables (cost_models/data/measurements_gaudi.csv). gimletc writes no launch for
it (Gaudi pools serve on vLLM's Gaudi plugin); it is the engine those measured rows and
``gimletc estimate --engine optimum-habana`` are costed under. Its scheduling costs are the Gaudi family's
(fitted on those rows); what it adds is its memory rule: a static KV cache of exactly the batch's tokens
([Note: KV memory] in cost_models/serving.py)."""

from __future__ import annotations

from backends.engines.base import ServingEngine
from cost_models.engines import Engine

OPTIMUM_HABANA_KV = ("https://github.com/huggingface/optimum-habana/blob/1d8504c6c7666a19d71968dba50976dceaf7c6b6/optimum/"
                     "habana/transformers/generation/utils.py#L1635-L1643 (with reuse_cache the KV cache is allocated for "
                     "the batch x (input + max_new_tokens) tokens, calculated_max_length) and models/llama/"
                     "modeling_llama.py#L528-L533 (cache_shape = (batch_size, kv_heads, max_seq_len, head_dim)): exactly "
                     "what the static batch needs, no share of free memory held back")


class OptimumHabana(ServingEngine):
    name = "optimum-habana"
    display = "Optimum-Habana"
    launchable = False  # no launch written: a cost record for the runs measured under it
    costs = Engine("optimum-habana", kv_memory_fraction=1.0, mixes_prefill=False, provenance=(
        ("kv_memory_fraction", OPTIMUM_HABANA_KV),
        ("step_overhead_s", "the device family's derate (cost_models/derates.py, fitted on the Gaudi tables)"),
        ("prefill_budget_tokens", "not modelled: optimum-habana prefills a static batch in one pass; the budget is "
                                  "the generic default")))


ENGINE = OptimumHabana()
