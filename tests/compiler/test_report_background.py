"""The report's pictures are drawn after the compile, in a process of its own, and its errors are kept
([Note: the report in the background] in compiler/cli/report.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

TINY = REPO / "examples" / "tiny_split"
DRAWN = ("pareto.png", "roofline.png", "power.png", "timeline.json")


def _fake_matplotlib(where, gate) -> None:
    """A matplotlib that waits for the file `gate`, then fails to import: the drawing is held until the test lets
    it go, and then fails."""
    package = where / "matplotlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os, time\n"
        "deadline = time.monotonic() + 90\n"
        f"while not os.path.exists({str(gate)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "raise ImportError('matplotlib stand-in: broken on purpose')\n")


def _until(condition, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_compile_returns_before_any_picture_and_a_failed_drawing_is_kept_in_a_file(tmp_path):
    """With matplotlib held back, the compile still returns, with plan.json, summary.md and report.json written and
    no picture yet, and says where the pictures will appear and where their errors go. Once matplotlib fails, the
    error is in report/drawing.log, and no picture or timeline was put in place."""
    fake, gate, out = tmp_path / "fake", tmp_path / "gate", tmp_path / "plan"
    _fake_matplotlib(fake, gate)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(
        [str(REPO), str(fake), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "compile", "llama-tiny", "--cluster",
                           str(TINY / "cluster.yaml"), "--workload", str(TINY / "workload.yaml"), "--out", str(out),
                           "--no-onnx", "--no-sensitivity"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    report = out / "report"
    for name in ("summary.md", "report.json", "inputs.json"):
        assert (report / name).is_file(), name
    assert json.loads((out / "status.json").read_text())["ok"]
    assert not any((report / name).exists() for name in DRAWN)
    said = " ".join(proc.stdout.split())  # the console wraps its lines
    assert f"drawing {report}/" in said and str(report / "drawing.log") in said
    plan = (out / "plan.json").read_bytes()

    gate.touch()
    log = report / "drawing.log"
    assert _until(lambda: "gimletc: internal error" in log.read_text()), log.read_text()
    text = log.read_text()
    assert "matplotlib stand-in: broken on purpose" in text and "Traceback" in text
    assert not any((report / name).exists() for name in DRAWN)
    assert not [p.name for p in report.iterdir() if p.name.startswith(".")]  # no half-drawn folder left behind
    assert (out / "plan.json").read_bytes() == plan


def test_waiting_for_a_drawing_that_fails_names_the_file_with_its_error(tmp_path):
    """`report.start` on a plan directory whose plan.json is broken: the drawing process fails, its error is in
    report/drawing.log, and waiting for it raises one message that says so and names the file."""
    from compiler.cli import report as report_command
    from compiler.ir.errors import GimletError

    (tmp_path / "report").mkdir()
    (tmp_path / "plan.json").write_text("{not json")
    child = report_command.start(tmp_path)
    with pytest.raises(GimletError, match="drawing the pictures failed") as failed:
        report_command.wait(child, tmp_path)
    log = tmp_path / "report" / "drawing.log"
    assert str(log) in str(failed.value) and "plan.json" in str(failed.value)
    assert "plan.json" in log.read_text() and child.returncode == 2
