"""Calibrate: measure this host with torch and fit its cost-model efficiencies (``gimletc calibrate``).

- `measure`: microbenchmarks and per-block times of tiny models, guarded by `quiet_timing`.
- `fit`: the one derate fitter (also used by ``tools/fidelity.py`` for accelerator families).
- `host`: the pass itself: measure, fit, report, save the `Calibration`.
"""

from __future__ import annotations

from typing import Any


def calibrate(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """See `compiler.calibrate.host.calibrate` (imported on call: it loads torch and numpy)."""
    from compiler.calibrate.host import calibrate as run

    return run(*args, **kwargs)
