"""The plan contract: what a plan directory holds, read by every stage after the placement.

- `schema`: the `Plan` (pydantic): what ``plan.json`` holds, field by field.
- `checks`: `load_plan`, the schema plus the checks of meaning types cannot state.
- `manifest`: ``manifest.json``, the sha256 of every file of the directory, and reading files through it.

`compiler.emit` writes it; the runtime, deploy, replan, the API and the report read it, none of them through
emit ([Note: layering] in tests/test_repo.py).
"""
