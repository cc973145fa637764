"""Runtime: execute a plan directory with stage workers over torch.distributed (`gimletc run`, `gimletc serve`).

It imports none of trace, cost, place or OR-Tools: a plan directory is all it reads. The driver is
`engine.Engine`; workers run `worker.main`; `launch` starts or awaits them ([Note: rendezvous]);
`speculative` holds [Note: speculative decoding]; `serve` is the OpenAI-compatible front.
"""
