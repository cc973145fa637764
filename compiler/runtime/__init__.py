"""Runtime: execute a plan directory with stage workers over torch.distributed (not built yet).

It will import none of trace, cost, place or OR-Tools: a plan directory is all it reads.
"""
