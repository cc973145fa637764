"""What two devices' measured speeds say about what binds: configurations of the serving sweeps measured on both.

For every (model, engine, release, tp, clients, input, output) of
../shared/reference/serving_sweeps.csv measured on two devices, prints the
measured TPOT ratio and the serving model's at ONE set of kernel efficiencies
for both (default: the first device's, `cost_models.derates.DEVICE_EFFS`):
what the devices' peaks alone make of the pair, no fitted difference between
them. The H100 SXM and H200 SXM have the same SMs and clocks and 3.35 against
4.8 TB/s of HBM: a step bound by the weight stream would run up to 1.43x
slower on the H100, one bound on the SMs or the host at the same speed.

    PYTHONPATH=. .venv/bin/python tools/device_pairs.py [--devices nvidia-h100-sxm,nvidia-h200-sxm] [--rows]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compiler.fidelity import sweeps as fs  # noqa: E402


def pairs(rows: list[dict], first: str, second: str) -> list[tuple[int, int]]:
    """Index pairs of rows that differ only in their device (`first`, `second`)."""
    seen: dict[tuple, dict[str, int]] = {}
    for i, r in enumerate(rows):
        key = tuple(r[k] for k in ("model", "backend", "backend_version", "tp", "concurrency", "input_len",
                                   "output_len"))
        seen.setdefault(key, {})[r["device"]] = i
    return [(d[first], d[second]) for d in seen.values() if first in d and second in d]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=fs.DEFAULT_CSV)
    parser.add_argument("--devices", default="nvidia-h100-sxm,nvidia-h200-sxm")
    parser.add_argument("--rows", action="store_true", help="print every pair")
    args = parser.parse_args()
    from cost_models.derates import DEVICE_EFFS, derate_for
    from backends.engines import all_costs

    first, second = args.devices.split(",")
    rows = fs.load_rows(args.csv)
    found = pairs(rows, first, second)
    if not found:
        sys.exit(f"no configuration of {args.csv} is measured on both {first} and {second}")
    used = sorted({i for p in found for i in p})
    own = derate_for("nvidia", device_id=first) if first in DEVICE_EFFS else derate_for("nvidia")
    kernels = (own.compute_eff, own.mem_eff, own.fp8_compute_eff or own.compute_eff)
    predicted = dict(zip(used, fs.errors([rows[i] for i in used], fs.physics([rows[i] for i in used], kernels),
                                         all_costs())))
    measured_ratio = [float(rows[a]["tpot_ms"]) / float(rows[b]["tpot_ms"]) for a, b in found]
    model_ratio = [predicted[a]["tpot_pred_ms"] / predicted[b]["tpot_pred_ms"] for a, b in found]
    if args.rows:
        for (a, b), m, p in zip(found, measured_ratio, model_ratio):
            r = rows[a]
            print(f"{r['model']} {r['backend']} {r['backend_version'] or '-'} tp{r['tp']} c{r['concurrency']} "
                  f"{r['input_len']}/{r['output_len']}: measured {m:.3f}, model {p:.3f}")
    q = statistics.quantiles(measured_ratio, n=4)
    print(f"{len(found)} configurations on {first} and {second}, TPOT {first} / {second}: measured median "
          f"{statistics.median(measured_ratio):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}), serving model at one set of "
          f"kernel efficiencies {kernels} median {statistics.median(model_ratio):.3f}")


if __name__ == "__main__":
    main()
