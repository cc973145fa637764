"""Baselines: what the plan is compared against, solved under the same cost model and constraints.

- ``greedy``: `compiler.place.greedy`;
- ``homogeneous:<device>``: the same instance restricted to pools of one device type, solved exactly.
"""

from __future__ import annotations

from compiler.ir.placement import Baseline, Instance
from compiler.place.greedy import greedy, greedy_rate
from compiler.place.ilp import solve


def baselines(inst: Instance, *, time_limit_s: float) -> list[Baseline]:
    hint = greedy(inst)
    power = {o.key: o.power_w for o in inst.options}  # predicted draw, as the plan reports
    out = [Baseline("greedy", greedy_rate(inst, hint), sum(power[k] * n for k, n in hint.items()))]
    for t, _count in inst.inventory:
        sub = inst.with_options([o for o in inst.options if set(o.device_types) == {t}])
        if not sub.options:
            continue
        s = solve(sub, "throughput", time_limit_s=time_limit_s, tie_break=False)
        if s.feasible:
            out.append(Baseline(f"homogeneous:{t}", s.requests_per_s, s.power_w))
    return out
