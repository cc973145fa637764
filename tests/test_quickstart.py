"""The README's quick start (compile, report, explain, run, serve) works as written on a fresh clone.

The committed tree is cloned into a temporary folder and the README's quick-start block runs there, line for
line, with this environment's installed dependencies (the clone's own packages first on ``PYTHONPATH``; the
install line itself is what `.ci/run` exercises, and its ``.venv/bin/activate`` is stood in for: ``gimletc`` is
on the PATH only after the block activates it) and an empty trace cache. Only the port is changed, to a
free one. In the default run: the tiny compile takes seconds (`tools/bench_small.py`), so the
whole block, two worker starts included, takes about 35 s on two busy cores.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import pytest

from tests.conftest import REPO, fresh_clone


def quickstart_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_quickstart_block_is_compile_report_run_serve():
    block = quickstart_block()
    for step in ("gimletc compile", "report/", "gimletc explain", "gimletc run", "gimletc serve", "curl"):
        assert step in block, step


@pytest.mark.timeout(600)
def test_readme_quickstart_runs_on_a_fresh_clone(tmp_path):
    clone, env = fresh_clone(tmp_path)
    script = quickstart_block().replace("8000", str(_free_port()))
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = clone / "plan-tiny" / "report"
    assert (report / "summary.md").is_file()
    pictures = ("pareto.png", "roofline.png", "power.png", "timeline.json")  # drawn after the compile returned
    deadline = time.monotonic() + 120
    while (report / "drawing.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (report / "drawing.log").exists(), "the pictures are still being drawn after 2 minutes"
    for name in pictures:
        assert (report / name).is_file(), name
    assert "pool0 (" in proc.stdout and "measured here:" in proc.stdout
    completion = json.loads(re.search(r'^\{"id".*$', proc.stdout, re.M).group(0))
    assert len(completion["choices"][0]["token_ids"]) == 8
    # greedy over the same weights: the server says what `gimletc run` said
    run_tokens = re.search(r"prompt 4 tokens -> \[([0-9, ]+)\]", proc.stdout).group(1)
    assert [int(t) for t in run_tokens.split(",")] == completion["choices"][0]["token_ids"]
