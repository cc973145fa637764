"""Speculative decoding across workers: a drafter pool drafts, the target verifies k + 1 positions per step.

One plan serves both draft lengths at once: a decode pool drafting k=1 and an
attention/FFN-split decode pair drafting k=3, fed by one prefill pool and one
drafter pool (5 stage workers). The drafter is `llama-tiny-draft` with the
target's first layer, embeddings and head (`truncated_drafter`), so it guesses
right often but not always. Expectations come from Hugging Face: `generate` for
the tokens, and a reference speculative loop with the same two HF models for
how many drafts each verification accepts.
"""

from __future__ import annotations

import pytest

from tests.runtime.conftest import PROMPTS, hf_reference, hf_speculative, truncated_drafter

NEW = 16


@pytest.fixture(scope="module")
def spec_plan(tmp_path_factory):
    from compiler.driver import block_graph
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import PoolShape, handmade_plan

    drafter = truncated_drafter(tmp_path_factory)
    shapes = [PoolShape("prefill", "prefill"), PoolShape("dec1", "decode", batch=4, draft="drafter", draft_k=1),
              PoolShape("attn", "decode-attention", batch=4, draft="drafter", draft_k=3,
                        draft_acceptance_rate=0.5),
              PoolShape("ffn", "decode-ffn"), PoolShape("drafter", "drafter", batch=8)]
    plan = handmade_plan(block_graph("llama-tiny"), shapes, draft_graph=block_graph("llama-tiny-draft"))
    out = tmp_path_factory.mktemp("plan-spec")
    write_plan_dir(plan, "llama-tiny", out, Options(onnx=False, draft_weights_dir=str(drafter)))
    return out, drafter


@pytest.mark.timeout(240)
def test_drafted_tokens_equal_greedy_target_tokens_for_k_1_and_3(spec_plan):
    from compiler.runtime.engine import Engine, Request
    from compiler.runtime.report import run_report

    plan_dir, drafter = spec_plan
    engine = Engine(plan_dir)
    try:
        reqs = engine.run([Request(list(p), max_new_tokens=NEW) for p in PROMPTS])
        report = run_report(engine, reqs)
    finally:
        engine.close()
    assert [r.unit for r in reqs] == ["dec1/r0"] * 4 + ["attn/r0"] * 4  # both k at once, 4 requests each

    want = hf_reference(plan_dir / "model", PROMPTS, NEW)
    assert [r.tokens for r in reqs] == [t for t, _ in want]

    spec = {s["unit"]: s for s in report["speculative"]}
    for unit, k, part in (("dec1/r0", 1, slice(0, 4)), ("attn/r0", 3, slice(4, 8))):
        ref = hf_speculative(plan_dir / "model", drafter, PROMPTS[part], NEW, k)
        assert [t for t, _ in ref] == [t for t, _ in want[part]]  # the reference loop is greedy decoding too
        counts = [a for _, accepted in ref for a in accepted]
        s = spec[unit]
        assert s["k"] == k and s["verifications"] == len(counts)
        assert s["accepted_tokens"] == sum(counts)
        assert s["histogram"] == {str(a): counts.count(a) for a in sorted(set(counts))}
        assert s["acceptance_rate"] == pytest.approx(sum(counts) / s["drafted_tokens"])
        # every verification emits its accepted drafts plus one token of the target's
        assert s["tokens_per_verification"] == pytest.approx((sum(counts) + len(counts)) / len(counts))
    assert set(spec["attn/r0"]["histogram"]) >= {"0", "3"} and len(spec["attn/r0"]["histogram"]) >= 3
    assert spec["attn/r0"]["predicted_tokens_per_verification"] == pytest.approx((1 - 0.5 ** 4) / (1 - 0.5))
    assert spec["dec1/r0"]["predicted_tokens_per_verification"] is None

    draft = next(t for t in report["transfers"] if t["kind"] == "draft_tokens")
    drafted = spec["dec1/r0"]["drafted_tokens"] + spec["attn/r0"]["drafted_tokens"]
    assert draft["measured_bytes"] == draft["predicted_bytes"] == 8 * drafted  # int64 ids, one receiving rank each
