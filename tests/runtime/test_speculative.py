"""Speculative decoding across workers: a drafter pool drafts, the target verifies k + 1 positions per step.

One plan serves both draft lengths at once: a decode pool drafting k=1 and an
attention/FFN-split decode pair drafting k=3, fed by one prefill pool and one
drafter pool of two tensor-parallel ranks (6 stage workers; the drafter's head
rank feeds each drafted token back to the other rank). Both models' weights are sliced from
`save_pretrained` folders (`checkpoints`): the target under another seed than
a plan's default, the drafter `llama-tiny-draft` with the target's first layer,
embeddings and head, so it guesses right often but not always. Expectations come from Hugging Face: `generate` for
the tokens, and a reference speculative loop with the same two HF models for
how many drafts each verification accepts. Seeded sampling runs through the same
engine (it replaces a separate sampling test: one engine start fewer).
"""

from __future__ import annotations

import pytest

from tests.runtime.conftest import PROMPTS, checkpoints, hf_reference, hf_speculative

NEW = 16


@pytest.fixture(scope="module")
def spec_plan(tmp_path_factory):
    from compiler.driver import block_graph
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import PoolShape, handmade_plan

    target, drafter = checkpoints(tmp_path_factory, seed=123)
    shapes = [PoolShape("prefill", "prefill"), PoolShape("dec1", "decode", batch=4, draft="drafter", draft_k=1),
              PoolShape("attn", "decode-attention", batch=4, draft="drafter", draft_k=3,
                        draft_acceptance_rate=0.5),
              PoolShape("ffn", "decode-ffn"), PoolShape("drafter", "drafter", tp=2, batch=8)]
    plan = handmade_plan(block_graph("llama-tiny"), shapes, draft_graph=block_graph("llama-tiny-draft"))
    out = tmp_path_factory.mktemp("plan-spec")
    write_plan_dir(plan, "llama-tiny", out, Options(onnx=False, weights_dir=str(target),
                                                     draft_weights_dir=str(drafter)))
    assert (out / "model" / "reference.json").is_file() and (out / "drafts" / "drafter" / "reference.json").is_file()
    return out, target, drafter


@pytest.fixture(scope="module")
def spec_run(spec_plan):
    """One engine: the 8 greedy requests (their report), then two sampled requests with one seed on the k=3 unit."""
    from compiler.runtime.engine import Engine, Request
    from compiler.runtime.report import run_report

    engine = Engine(spec_plan[0])
    try:
        reqs = engine.run([Request(list(p), max_new_tokens=NEW) for p in PROMPTS])
        report = run_report(engine, reqs)
        filler = [Request(list(PROMPTS[0]), max_new_tokens=NEW, ignore_eos=True) for _ in range(4)]  # fills dec1
        sampled = [Request(list(PROMPTS[2]), max_new_tokens=NEW, temperature=0.8, top_p=0.9, seed=7,
                           ignore_eos=True) for _ in range(2)]
        engine.run(filler + sampled)
    finally:
        engine.close()
    return reqs, report, sampled


@pytest.mark.timeout(240)
def test_drafted_tokens_equal_greedy_target_tokens_for_k_1_and_3(spec_plan, spec_run):
    _, target, drafter = spec_plan
    reqs, report, _ = spec_run
    assert [r.unit for r in reqs] == ["dec1/r0"] * 4 + ["attn/r0"] * 4  # both k at once, 4 requests each

    want = hf_reference(target, PROMPTS, NEW)  # greedy decoding of the target alone
    assert [r.tokens for r in reqs] == [t for t, _ in want]

    spec = {s["unit"]: s for s in report["speculative"]}
    for unit, k, part in (("dec1/r0", 1, slice(0, 4)), ("attn/r0", 3, slice(4, 8))):
        ref = hf_speculative(target, drafter, PROMPTS[part], NEW, k)
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


def test_sampled_tokens_with_a_drafter_are_the_targets_own_samples(spec_plan, spec_run):
    """A draft is kept only when it equals the token sampled from the target, so the tokens are those of sampling
    the target token by token with the request's seeded generator: here, temperature and top-p by hand."""
    import torch
    from transformers import AutoModelForCausalLM

    _, _, (a, b) = spec_run
    assert a.unit == b.unit == "attn/r0" and a.tokens == b.tokens  # same prompt, same seed, one batch
    target = AutoModelForCausalLM.from_pretrained(str(spec_plan[1]), dtype=torch.float32).eval()
    generator, tokens = torch.Generator().manual_seed(7), []
    with torch.no_grad():
        for _ in range(NEW):
            logits = target(torch.tensor([PROMPTS[2] + tokens])).logits[0, -1]
            probs = torch.softmax(logits / 0.8, dim=-1)
            ranked, order = torch.sort(probs, descending=True)
            ranked = torch.where(torch.cumsum(ranked, 0) - ranked < 0.9, ranked, torch.zeros_like(ranked))
            probs = torch.zeros_like(probs).scatter(0, order, ranked)
            tokens.append(int(torch.multinomial(probs / probs.sum(), 1, generator=generator)))
    assert a.tokens == tokens


def _draft_plan(**decode):
    from compiler.driver import block_graph
    from compiler.emit.handmade import PoolShape, handmade_plan

    shapes = [PoolShape("prefill", "prefill"), PoolShape("decode", "decode", **decode),
              PoolShape("drafter", "drafter")]
    return handmade_plan(block_graph("llama-tiny"), shapes, draft_graph=block_graph("llama-tiny-draft"))


def test_the_plan_side_contract_round_trips_and_bad_drafts_are_refused(tmp_path):
    import json

    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.plan.schema import Plan
    from compiler.ir.errors import BadInput
    from compiler.runtime.routes import units

    plan = _draft_plan(draft="drafter", draft_k=2)
    assert Plan.model_validate_json(plan.dumps()) == plan
    decode = plan.pools[1]
    assert (decode.draft.pool, decode.draft.model, decode.draft.k) == ("drafter", "llama-tiny-draft", 2)
    assert [(t.kind, t.src_pool, t.dst_pool) for t in plan.transfers] == [("kv", "prefill", "decode"),
                                                                           ("draft", "drafter", "decode")]
    bad_k = json.loads(plan.dumps())
    bad_k["pools"][1]["draft"]["k"] = 0
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Plan.model_validate(bad_k)

    on_prefill = plan.model_copy(update={"pools": [plan.pools[0].model_copy(update={"draft": decode.draft}),
                                                   *plan.pools[1:]]})
    with pytest.raises(BadInput, match="prefill.*has a draft block"):
        units(on_prefill)
    orphan = _draft_plan()  # a drafter pool no pool drafts with
    with pytest.raises(BadInput, match="drafter pool drafter drafts for no pool"):
        write_plan_dir(orphan, "llama-tiny", tmp_path / "orphan", Options(onnx=False))

    from compiler.inputs.model_spec import resolve_model

    other_vocab = {**resolve_model("llama-tiny-draft").config, "vocab_size": 256}
    (tmp_path / "draft.json").write_text(json.dumps(other_vocab))
    draft = decode.draft.model_copy(update={"model": str(tmp_path / "draft.json")})
    mismatched = plan.model_copy(update={"pools": [plan.pools[0], decode.model_copy(update={"draft": draft}),
                                                   plan.pools[2]]})
    with pytest.raises(BadInput, match="vocab_size 256, the target 512"):
        write_plan_dir(mismatched, "llama-tiny", tmp_path / "vocab", Options(onnx=False))
