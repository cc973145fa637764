"""Cost: turn a BlockGraph into costed pool options, or one deployment into an estimate.

- `deployment`: a device id, counts and a `Precision` -> a checked `Deployment` with its derate.
- `pool_options`: every candidate replica of every role on every device type, costed (`PoolOption`).
- `instance`: the options plus link and KV hand-off costs, as the placement `Instance`.
- `estimate`: one homogeneous deployment's `Estimate` (``gimletc estimate``).

The arithmetic lives in `cost_models`; this stage decides what to cost. It
imports neither the tracer nor torch (a test checks this).
"""
