"""Place: choose replica counts of costed pool options and the KV flows between them (a MILP, HiGHS).

- `ilp`: the exact model and `solve`; `candidates`: which options the model sees ([Note: exact pruning]);
  `ratio`: the ratio objectives (Dinkelbach); `moves`: re-solving from a running placement.
- `infeasible`: which constraint families bind, and a message with the numbers.
- `greedy`: the heuristic baseline; `baselines`: greedy and single-device-type placements.

Imports only `compiler.ir`, OR-Tools and numpy (a test checks this): the placement
sees pool options, never the model, the cost models or the vendors.
"""
