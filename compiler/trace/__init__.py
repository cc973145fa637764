"""Trace a model and partition it into a `BlockGraph`: the first two arrows of the pipeline.

- `export`: build the model on the meta device and ``torch.export`` its prefill and decode steps.
- `ownership`: which block (embed, layer attention, layer FFN/MoE, head) owns each graph node.
- `partition`: count each block's FLOPs and bytes into a `BlockGraph`.
- `trace_cache`: the on-disk cache of BlockGraphs.
- `stage_split`: the same ownership rule, splitting a real model into executable per-block pieces.
- `summarize`: a BlockGraph evaluated at one shape (what ``gimletc inspect`` prints).

Everything here but `trace_cache` and `summarize` imports torch when called.
"""
