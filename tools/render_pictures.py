"""Render the pictures docs/cli/report.md shows into docs/img/, from the tiny quick-start example (deterministic).

Runs, each a fresh `gimletc` process with its own trace cache:

- ``gimletc compile llama-tiny --cluster examples/tiny_split/cluster.yaml --workload
  examples/tiny_split/workload.yaml --no-onnx --wait-for-report --out TMP`` (the README's quick start, without the
  ONNX export the pictures do not need, waiting for the pictures it draws after it returns), and copies its
  ``report/roofline.png``, ``report/pareto.png`` and ``report/power.png`` to ``docs/img/report-roofline.png``,
  ``report-pareto.png`` and ``report-power.png``;
- ``gimletc pareto`` on the same inputs under a 3 kW budget (so the single-type fleets are posed beside the plan),
  5 points, and copies its ``pareto.png`` to ``docs/img/pareto.png``.

The same inputs give the same bytes (pictures carry no version stamp; the solver stops on deterministic budgets),
so a rerun that changes a file shows a change of behaviour: review the pictures as a diff.

    .venv/bin/python tools/render_pictures.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "img"
INPUTS = ["llama-tiny", "--cluster", "examples/tiny_split/cluster.yaml", "--workload",
          "examples/tiny_split/workload.yaml"]


def _gimletc(*args: str, cache: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "-q", *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "GIMLETC_CACHE_DIR": cache, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        raise SystemExit(f"gimletc {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        cache = f"{work}/cache"
        _gimletc("compile", *INPUTS, "--no-onnx", "--wait-for-report", "--out", f"{work}/plan", cache=cache)
        for name in ("roofline", "pareto", "power"):
            shutil.copyfile(f"{work}/plan/report/{name}.png", OUT / f"report-{name}.png")
        _gimletc("pareto", *INPUTS, "--power-budget", "3kW", "--points", "5", "--out", f"{work}/pareto", cache=cache)
        shutil.copyfile(f"{work}/pareto/pareto.png", OUT / "pareto.png")
    for path in sorted(OUT.glob("*.png")):
        print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
