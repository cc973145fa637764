"""deploy --local and the host's engine calibration (a bench compares with what the plan predicts, and a
plan compiled for a never-measured host predicts nothing bounded)."""

from __future__ import annotations

import json

import pytest

from tests.deploy.helpers import DOCS, compiled_plan


class _Stop(Exception):
    pass


def test_an_uncalibrated_host_is_said_before_deploying_and_measured_first_when_asked(tmp_path, monkeypatch):
    """With no engine record in the cache and no profile in the plan, deploy says so (naming the calibrate command
    and --calibrate) before any engine set-up; with --calibrate it measures the engine first; once a record exists
    nothing is said."""
    import compiler.calibrate.engine as engine
    import compiler.deploy.local as local
    from compiler.plan.checks import load_plan
    from compiler.ir.calibration import engine_record_path

    monkeypatch.setenv("GIMLETC_CACHE_DIR", str(tmp_path / "cache"))
    plan = compiled_plan(tmp_path, "running", DOCS)
    order: list[str] = []
    monkeypatch.setattr(engine, "calibrate_engine", lambda progress=None: order.append("calibrate"))

    def no_engines(_progress):
        order.append("engine venv")
        raise _Stop

    monkeypatch.setattr(local, "engine_python", no_engines)
    said: list[str] = []
    with pytest.raises(_Stop):
        local.deploy_local(plan, progress=said.append)
    assert order == ["engine venv"]
    assert any("never measured" in s and "gimletc calibrate --device cpu-host --engine vllm" in s
               and "--calibrate" in s for s in said), said
    from compiler.cli.main import build_parser

    args = build_parser().parse_args(["deploy", str(plan), "--local", "--calibrate", "-q"])
    with pytest.raises(_Stop):  # the CLI's --calibrate
        args.func(args)
    assert order == ["engine venv", "calibrate", "engine venv"]
    path = engine_record_path("cpu-host", "vllm")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"engine": "vllm"}))
    assert local.uncalibrated(load_plan(plan)) is None
