"""Option groups shared by the commands, and the flag-value parsers behind them.

A command builds its parser from these groups, so ``--dtype`` or
``--cluster`` mean the same thing (same help, same checks) everywhere.
"""

from __future__ import annotations

import argparse
import re

from compiler.ir.precision import DTYPE_BYTES, WEIGHT_DTYPES, Precision

MODEL_HELP = "preset name, path to a Hugging Face config.json or folder, or module:callable"


def int_at_least(low: int):
    """An argparse type: a whole number >= `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)


def port(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535.

    >>> port("8000")
    8000
    """
    value = int_at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port; give one from 1 to 65535, e.g. 8000")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0 (argparse names the flag in the error, and exits 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def nonneg_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def power_w(text: str) -> float:
    """``200kW`` / ``1.5MW`` / ``50000W`` / ``2e5W`` -> watts. The unit is required: cluster files speak kW, so a
    bare ``200`` would be ambiguous.

    >>> power_w("200kW"), power_w("1.5MW"), power_w("800 W"), power_w("2e5W")
    (200000.0, 1500000.0, 800.0, 200000.0)
    """
    m = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(gw|mw|kw|w)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a power with its unit, e.g. 200kW, 1.5MW or 800W")
    if float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a power budget must be positive (the most the fleet may draw), "
                                         "e.g. 200kW")
    if m.group(2) is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no unit; write {m.group(1)}kW (as cluster files use) "
                                         f"or {m.group(1)}W")
    value = float(m.group(1)) * {"gw": 1e9, "mw": 1e6, "kw": 1e3, "w": 1.0}[m.group(2)]
    from compiler.inputs.cluster import MAX_POWER_BUDGET_W

    if value > MAX_POWER_BUDGET_W:
        raise argparse.ArgumentTypeError(f"{text!r} is {value:.3g} W, beyond any site (the largest AI campuses "
                                         f"draw a few GW); give at most {MAX_POWER_BUDGET_W / 1e9:.0f}GW, e.g. 200kW")
    return value


def add_model(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    p.add_argument("model", nargs="?" if optional else None, help=MODEL_HELP)


def add_precision(p: argparse.ArgumentParser) -> None:
    """``--dtype`` and ``--kv-dtype``: together they make the command's one `Precision`."""
    p.add_argument("--dtype", choices=WEIGHT_DTYPES, default="bf16", help="weight dtype (default bf16)")
    p.add_argument("--kv-dtype", choices=tuple(DTYPE_BYTES), default=None,
                   help="KV-cache dtype (default: the weight dtype; fp8 under fp4 weights)")


def add_json(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON instead of tables")


def add_calibration(p: argparse.ArgumentParser) -> None:
    """``--calibration NAME|FILE``: a profile of the user's own fleet (``gimletc calibrate --from``)."""
    p.add_argument("--calibration", metavar="NAME|FILE", default=None,
                   help="a calibration profile made by `gimletc calibrate --from` (its name, or its file): its "
                        "devices' engine costs, kernel efficiencies and intervals replace the shipped ones "
                        "(overrides the cluster file's calibration)")


def add_placement_inputs(p: argparse.ArgumentParser, *, services: bool = False) -> None:
    """What ``compile`` and ``pareto`` place: a fleet, a workload, a budget, a solver time limit, an output folder.
    With `services`, MODEL and ``--workload`` may give way to ``--services FILE`` (the command checks)."""
    add_model(p, optional=services)
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML (examples/clusters/)")
    p.add_argument("--workload", required=not services, metavar="FILE",
                   help="workload YAML (examples/workloads/)" + ("; not with --services" if services else ""))
    if services:
        p.add_argument("--services", metavar="FILE",
                       help="place several models on the fleet together instead of MODEL: a services YAML, each "
                            "service a model, its workload file, dtype, weight and optional min_rate_per_s "
                            "(examples/services/); writes DIR/services.json, DIR/summary.md, a plan folder per "
                            "service and DIR/k8s/, which routes requests by model across them")
    p.add_argument("--power-budget", type=power_w, metavar="POWER",
                   help="override the cluster's budget, with a unit: 200kW, 1.5MW or 800W")
    p.add_argument("--cost-budget", type=positive_float, metavar="USD_PER_HOUR",
                   help="override the cluster's cost_budget_per_hour: dollars per hour the devices may cost")
    add_precision(p)
    add_calibration(p)
    p.add_argument("--time-limit", type=positive_float, default=60.0, metavar="S",
                   help="solver time limit, seconds (default 60)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


def precision_of(args: argparse.Namespace) -> Precision:
    return Precision.of(args.dtype, args.kv_dtype)


def plan_inputs(args: argparse.Namespace, *, required: bool = False):
    """The compile inputs recorded with plan ``args.plan`` (its report/inputs.json), with ``--cluster`` and
    ``--workload`` replacing theirs (both needed when none are recorded); None when none are recorded or given,
    unless `required` (``gimletc replan`` re-costs, ``gimletc explain`` can do without)."""
    import dataclasses
    from pathlib import Path

    from compiler.compile_inputs import CompileInputs
    from compiler.plan.checks import load_plan
    from compiler.ir.errors import BadInput

    recorded = CompileInputs.load(args.plan)
    given = {k: str(Path(v).resolve()) for k, v in (("cluster", args.cluster), ("workload", args.workload)) if v}
    if not given:
        if recorded is None and required:
            raise BadInput(f"plan {args.plan}: no report/inputs.json recorded; give --cluster and --workload (the "
                           "files it was compiled from)")
        return recorded
    if recorded is None:
        if len(given) < 2:
            raise BadInput(f"plan {args.plan}: no report/inputs.json recorded; give both --cluster and --workload")
        return CompileInputs.of(load_plan(args.plan).model, given["cluster"], given["workload"])
    return dataclasses.replace(recorded, **given)
