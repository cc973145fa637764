"""The replan example of docs/cli/replan.md (the README's page for `gimletc replan`, before its first section)
runs as written on a fresh clone:
the day plan compiled, scrapes of its engines written by ``tools/simulate_scrapes.py`` (as the plan predicts
them, then after the mix turned to documents), and a replan on each: no move on the first, a move toward
prefill on the second. The output the page shows is what the block prints, abridged: each line shown is a
line printed, or (ending in `` ...``) the start of one.

As in tests/test_quickstart.py: the committed tree is cloned into a temporary folder and the block runs there
line for line, with this environment's packages (``.venv/bin/activate`` stood in for) and an empty trace
cache. About 45 s on two busy cores, most of it tracing llama-3.1-8b afresh: in the slow run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compiler.place.moves import base_key
from tests.conftest import REPO

PAGE = REPO / "docs" / "cli" / "replan.md"


def _section() -> str:
    """The page's example: everything before its first section."""
    return PAGE.read_text().split("\n## ", 1)[0]


def replan_block() -> str:
    """The commands of the replan example."""
    return _section().split("```bash\n", 1)[1].split("```", 1)[0]


def shown_output() -> list[str]:
    """The lines of the output the page shows for the example (the first block after the commands that starts
    with ``$ ``), without the ``$`` lines, the ``...`` lines and blank lines."""
    after = _section().split("```bash\n", 1)[1].split("```", 1)[1]
    block = next(b for b in after.split("```")[1::2] if b.lstrip("\n").startswith("$ "))
    return [line for line in block.splitlines() if line.strip() and line.strip() != "..." and not line.startswith("$ ")]


def test_the_block_compiles_writes_scrapes_and_replans_both():
    block = replan_block()
    for step in ("gimletc compile", "tools/simulate_scrapes.py day/ --out day-scrapes/",
                 "gimletc replan day/ --metrics day-scrapes/", "--out night-scrapes/",
                 "gimletc replan day/ --metrics night-scrapes/ --out night/"):
        assert step in block, step


@pytest.mark.slow  # llama-3.1-8b traced cold in a fresh clone, then compiled and replanned twice: 25-80 s on 2
# cores; the default run checks the block's commands above and runs replan end to end in test_cli.py (CI runs -m slow)
@pytest.mark.timeout(600)
def test_readme_replan_example_runs_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "activate").write_text(f'export PATH="{os.path.dirname(sys.executable)}:$PATH"\n')
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "gimletc")))  # gimletc only once activated
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(clone), "GIMLETC_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(["bash", "-e", "-c", replan_block()], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # the engines as the plan predicts them: no move; after the turn to documents: a move
    no_move = out.index("decision: the running placement is still the best reachable: no move")
    assert out.index("decision: move:") > no_move and out.count("decision:") == 2
    assert sorted(p.name for p in (clone / "day-scrapes").iterdir()) == [f"scrape-00{i}.prom" for i in range(4)]
    day = {base_key(p["option"]): p["replicas"] for p in json.loads((clone / "day" / "plan.json").read_text())["pools"]}
    night = {base_key(p["option"]): p["replicas"]
             for p in json.loads((clone / "night" / "plan.json").read_text())["pools"]}

    def prefilling(pools: dict[str, int]) -> int:
        return sum(n for shape, n in pools.items() if shape.startswith(("prefill:", "colocated:")))

    assert prefilling(night) > prefilling(day), (day, night)
    printed = [line.rstrip() for line in out.splitlines()]
    for line in shown_output():
        if line.endswith(" ..."):
            assert any(p.startswith(line[:-4]) for p in printed), f"docs/cli/replan.md shows a line never printed: {line!r}"
        else:
            assert line in printed, f"docs/cli/replan.md shows a line never printed: {line!r}"
