"""Emit: turn a placement into the plan directory's contents.

- `plan`: the `Plan` schema (pydantic): what ``plan.json`` holds and how it loads back.
- `emit_plan`: build the `Plan` from the BlockGraph, inputs and the solved placement.
"""
