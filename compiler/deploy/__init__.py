"""Deploying a compiled plan on real serving engines on this machine (`gimletc deploy --local`, `gimletc bench`).

Reads only a plan directory (like `compiler.runtime`): it imports the plan schema from `compiler.emit` and no
stage that traces, costs or places.
"""
