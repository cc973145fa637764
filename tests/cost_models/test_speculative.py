"""Speculative rounds, separate and fused ([Note: fused speculation] in cost_models/speculative.py), against hand
arithmetic on the host's per-step time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler.ir.precision import Precision

K, ACCEPTANCE, OUTPUT_LEN = 3, 0.5, 100
# Tokens a round yields at a = 0.5, k = 3: 1 + 0.5 + 0.25 + 0.125.
TOKENS = 1.875


@pytest.fixture(scope="module")
def graphs():
    from compiler.driver import block_graph

    return {m: block_graph(m) for m in ("llama-tiny", "llama-tiny-draft")}


def _dep(step_overhead_s: float, seq_overhead_s: float = 0.0, device_id: str = "aws-trn2"):
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served

    dep = deployment(served(device_id), 1, 1, 1, Precision.of("bf16"))
    return replace(dep, derate=replace(dep.derate, step_overhead_s=step_overhead_s),
                   engine=replace(dep.engine, seq_overhead_s=seq_overhead_s))


def _round(graphs, fused: bool, batch: int, step_overhead_s: float, seq_overhead_s: float = 0.0):
    from cost_models.speculative import Drafting, speculative_round

    dep = _dep(step_overhead_s, seq_overhead_s)
    drafting = Drafting(graphs["llama-tiny-draft"], dep, ACCEPTANCE, K, link_bw_bytes_per_s=float("inf"),
                        link_latency_s=0.0, fused=fused)
    return speculative_round(graphs["llama-tiny"], dep, drafting, batch, context=512, prompt=256,
                             output_len=OUTPUT_LEN)


def test_a_fused_round_pays_the_host_once_a_separate_one_per_draft_step(graphs):
    """Raising the step overhead by 1 ms (the engine overlaps nothing, pp 1) adds 1 ms to a fused round (its one
    launch: the verification) and 1 + k + arrivals ms to a separate one (the verification, k draft steps and the
    drafter's share of prompt prefills: batch x 1.875 tokens / 100 output tokens = 0.01875 of a request at batch 1)."""
    assert _round(graphs, False, 1, 0.0).tokens == pytest.approx(TOKENS)
    arrivals = 1 * TOKENS / OUTPUT_LEN
    for fused, launches in ((True, 1.0), (False, 1.0 + K + arrivals)):
        low, high = _round(graphs, fused, 1, 1e-3), _round(graphs, fused, 1, 2e-3)
        assert high.time_s - low.time_s == pytest.approx(launches * 1e-3, rel=1e-6), fused


def test_fused_and_separate_rounds_differ_by_the_draft_steps_host_time(graphs):
    """At batch 4, a 4 ms step overhead and 0.1 ms per running sequence, a separate round's k = 3 draft steps each
    pay 4 + 4 x 0.1 = 4.4 ms of host time and its 4 x 1.875 / 100 = 0.075 prompt prefills 4 + 0.1 = 4.1 ms each:
    13.2 + 0.3075 = 13.5075 ms that a fused round does not pay. The device work and the verification are the same,
    and a fused round transfers nothing."""
    separate, fused = _round(graphs, False, 4, 4e-3, 1e-4), _round(graphs, True, 4, 4e-3, 1e-4)
    assert separate.time_s - fused.time_s == pytest.approx(K * 4.4e-3 + 0.075 * 4.1e-3, rel=1e-6)
    assert fused.verify == separate.verify and fused.transfer_s == 0.0
    assert fused.draft.compute_s == pytest.approx(separate.draft.compute_s)
    assert fused.draft.memory_s == pytest.approx(separate.draft.memory_s)


def test_a_fused_drafter_runs_on_the_targets_devices(graphs):
    from cost_models.speculative import Drafting, speculative_round

    target, other = _dep(1e-3), _dep(1e-3, device_id="nvidia-h100-sxm")
    drafting = Drafting(graphs["llama-tiny-draft"], other, ACCEPTANCE, K, float("inf"), 0.0, fused=True)
    with pytest.raises(ValueError, match="fused drafter runs on the target's devices"):
        speculative_round(graphs["llama-tiny"], target, drafting, 1, 512, 256, OUTPUT_LEN)
