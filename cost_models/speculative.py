"""Speculative decoding with the drafter on a pool of its own, of any device type.

[Note: speculative decoding placement] A round drafts ``k`` tokens on the
drafter (k decode steps of the draft model at the target's batch, the draft
model keeping its own KV of every sequence), ships them to the target, which
verifies ``k + 1`` positions of every sequence in one step (weights and each
sequence's KV read once, ``k + 1`` tokens of FLOPs), and ships the verdict
back. With per-token acceptance rate a, a round yields
``E = (1 - a^(k+1)) / (1 - a)`` tokens per sequence (Leviathan et al. 2023,
https://arxiv.org/abs/2211.17192), so TPOT is the round over E. The drafter
also prefills each new request's prompt into its own cache. Drafter and
target wait for each other: no overlap across rounds is assumed. Every time
is a prediction of the roofline.

[Note: fused speculation] An engine may compile drafter and target into one
program on the target's devices (NxD Inference's ``enable_fused_speculation``:
"the draft model and target model are fused into a single compiled model",
https://github.com/aws-neuron/aws-neuron-sdk/blob/0348aef8c44efdc7a40d29673886bcda4d76cc25/libraries/nxd-inference/developer_guides/feature-guide.rst;
its token-generation forward loops over the k draft steps and then verifies,
inside the traced graph). A round is then one launch: the host's per-step time
(the derate's step overhead, the engine's per-sequence time) is paid once, by
the verification, and the k draft steps cost their device time alone (blocks,
per-block gaps, TP all-reduces). The drafter's prefill runs in the target's
prefill program the same way. No token leaves the devices, so nothing is
transferred. ``Drafting.fused`` says which case a drafter is; no new constant
enters, only which of the existing step costs a draft step pays.

>>> round(expected_tokens(0.8, 4), 4)
3.3616
>>> expected_tokens(0.0, 4)
1.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.ir.block_graph import BlockGraph
from cost_models.comm import p2p_s
from cost_models.serving import Deployment, MemoryPlan, memory_plan
from cost_models.steps import Batch, StepTime, decode_step, prefill_time, step

#: Bytes of one token id on the wire (int64, what the runtime sends: compiler/runtime/speculative.py).
TOKEN_BYTES = 8


def expected_tokens(acceptance: float, draft_tokens: int) -> float:
    """Tokens a verification yields per sequence on average: the accepted prefix of the k drafted tokens plus
    the target's own next token (Leviathan et al. 2023, equation 1)."""
    a, k = acceptance, draft_tokens
    return k + 1.0 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


@dataclass(frozen=True, slots=True)
class Drafting:
    """A drafter replica serving one target replica, and how the two exchange tokens.

    ``fused``: the drafter runs inside the target's program on the target's devices ([Note: fused speculation]);
    the link fields are then unused.
    """

    graph: BlockGraph  # the draft model
    dep: Deployment  # one drafter replica
    acceptance: float
    draft_tokens: int
    link_bw_bytes_per_s: float
    link_latency_s: float
    fused: bool = False

    @property
    def step_dep(self) -> Deployment:
        """The deployment a draft step or prefill runs as: the drafter's own, or, fused, the same without the host's
        per-step and per-sequence time (the round's one launch pays it; [Note: fused speculation])."""
        if not self.fused:
            return self.dep
        return replace(self.dep, derate=replace(self.dep.derate, step_overhead_s=0.0),
                       engine=replace(self.dep.engine, seq_overhead_s=0.0))


def drafter_prefill(drafting: Drafting, batch: float, prompt: float) -> StepTime:
    """The drafter's prefill of `batch` prompts of `prompt` tokens (fused: device time only)."""
    return prefill_time(drafting.graph, drafting.step_dep, batch, prompt)


@dataclass(frozen=True, slots=True)
class SpecRound:
    """One draft-and-verify round of a batch: its parts, and the tokens it yields per sequence.

    ``draft`` sums the drafter's k steps and its share of prompt prefills; ``verify`` is the target's step.
    """

    time_s: float
    draft: StepTime
    verify: StepTime
    transfer_s: float
    tokens: float

    @property
    def tpot_s(self) -> float:
        return self.time_s / self.tokens


def speculative_round(graph: BlockGraph, target: Deployment, drafting: Drafting, batch: float, context: float,
                      prompt: float, output_len: float, plan: MemoryPlan | None = None) -> SpecRound:
    """A round of `batch` sequences at `context` cached tokens; requests have `prompt` tokens and `output_len`
    output tokens (how often the drafter prefills a new one); see [Note: speculative decoding placement] and, for a
    fused drafter, [Note: fused speculation]."""
    k = drafting.draft_tokens
    if drafting.fused and drafting.dep.device != target.device:
        raise ValueError(f"a fused drafter runs on the target's devices ({target.device.id}), not on "
                         f"{drafting.dep.device.id}")
    plan = plan or memory_plan(graph, target, graph.kv_bytes_per_sequence(context, target.precision) * batch
                               / target.group)
    verify = step(graph, target, Batch(decodes=batch, context=context, prefill_tokens=batch * k,
                                       prefill_requests=batch, prefill_before=context, every_logit=True), plan)
    tokens = expected_tokens(drafting.acceptance, k)
    arrivals = batch * tokens / max(output_len, 1.0)  # requests that start per round
    draft = _sum(((k, decode_step(drafting.graph, drafting.step_dep, batch, context)),
                  (arrivals, drafter_prefill(drafting, 1, prompt))))
    transfer = 0.0 if drafting.fused else sum(
        p2p_s(nbytes, bw_bytes_per_s=drafting.link_bw_bytes_per_s, latency_s=drafting.link_latency_s)
        for nbytes in (batch * k * TOKEN_BYTES, batch * TOKEN_BYTES))
    return SpecRound(draft.time_s + verify.time_s + transfer, draft, verify, transfer, tokens)


def _sum(parts: tuple[tuple[float, StepTime], ...]) -> StepTime:
    """`n` times each step, one after another."""
    return StepTime(*(sum(n * getattr(t, f) for n, t in parts)
                      for f in ("time_s", "compute_s", "memory_s", "comm_s", "overhead_s")))
