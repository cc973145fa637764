"""Each stage rank's ONNX export passes onnx.checker, runs in onnxruntime and matches the torch stage within 1e-4."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import build_plan_dir, split_shapes


@pytest.mark.timeout(240)
def test_every_onnx_stage_matches_torch(tmp_path_factory):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from safetensors.torch import load_file

    from compiler.emit.onnx_export import example_inputs, stage_module
    from compiler.plan.checks import load_plan

    plan_dir = build_plan_dir(tmp_path_factory, "mixtral-tiny", split_shapes(2, 1), onnx=True)
    ranks = [r for p in load_plan(plan_dir).pools for s in p.stages for r in s.execution.ranks]
    assert len(ranks) == 4 and all(r.onnx for r in ranks)
    for r in ranks:
        path = plan_dir / r.onnx
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        module, blocks = stage_module((plan_dir / r.program).read_text(), load_file(str(plan_dir / r.weights)))
        first, positions = example_inputs(blocks, 64, tokens=11, seed=3)  # another length than the export's
        with torch.no_grad():
            want = module(first, positions).numpy()
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        got = session.run(None, {names[0]: first.numpy(), names[1]: positions.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=r.onnx)


@pytest.mark.timeout(240)
def test_pools_running_the_same_stage_program_share_one_export(tmp_path, monkeypatch):
    """Two colocated pools of llama-tiny on two device types run the same blocks: their stage programs differ only
    in the title, so the export runs once and both pools get its bytes ([Note: one ONNX export per stage program])."""
    from compiler.driver import block_graph
    from compiler.emit import onnx_export
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import PoolShape, handmade_plan

    calls = []
    export = onnx_export.export_stage
    monkeypatch.setattr(onnx_export, "export_stage", lambda *a, **kw: (calls.append(a[-1]), export(*a, **kw))[1])
    shapes = [PoolShape("a", "colocated"), PoolShape("b", "colocated", device="nvidia-h100-sxm")]
    plan = write_plan_dir(handmade_plan(block_graph("llama-tiny"), shapes), "llama-tiny", tmp_path, Options())
    files = [tmp_path / r.onnx for p in plan.pools for s in p.stages for r in s.execution.ranks]
    assert len(files) == 2 and len(calls) == 1
    assert files[0].read_bytes() == files[1].read_bytes()
    assert (tmp_path / "stages" / "a" / "s0_tp0.py").read_text() != (tmp_path / "stages" / "b" / "s0_tp0.py").read_text()
