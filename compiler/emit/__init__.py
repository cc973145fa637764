"""Emit: turn a placement into the plan directory's contents.

- `emit_plan`: build the `Plan` (the contract in `compiler.plan.schema`) from the BlockGraph, inputs and the
  solved placement.
- `artifacts`: write the plan directory; `serving/` each pool's engine launch and the router, `k8s/` the
  orchestrators' manifests, `report/` the summary and pictures.
"""
