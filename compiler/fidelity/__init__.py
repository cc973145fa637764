"""The fitter that makes the shipped constants, and the scores that say how far to trust them.

`measurements` fits each device family's derates (kernel efficiencies and step overheads) on published
measurements (../shared/reference/measurements.csv and cost_models/data/), with leave-one-out and held-out
errors; `sweeps` fits the serving engines' step costs and each GPU's kernel efficiencies on measured serving
sweeps (../shared/reference/serving_sweeps.csv), leaving groups of model, device and engine out; the
``*_report`` modules write their tables (docs/fidelity-published.md, docs/fidelity.md). Their command lines are
tools/fidelity.py and tools/fidelity_sweeps.py; ``gimletc calibrate --from`` fits a user's own benchmark runs
with the same fitter (`compiler.calibrate.fit.fit_fields`).
"""
