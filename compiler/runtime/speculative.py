"""Speculative decoding across workers: the drafter's route, acceptance, and what the drafter's cache still holds.

[Note: speculative decoding]
The plan side (`compiler.plan.schema.Draft`): a decoding pool (colocated, decode
or decode-attention) may carry ``draft = {pool, model, k, ...}`` naming a pool
of role ``drafter`` whose stages run a smaller model with the same vocabulary
(`llama-tiny-draft` in tests). Replica r of the target uses drafter replica
``r % replicas``. A ``draft`` transfer runs from the drafter to the pool that
holds the target's decode ``embed``; it carries int64 token ids.

One verification of a batch, for request r whose tokens so far are S (prompt
and generated, the last not yet in the target's cache, at position p = |S|-1),
drafting k_r = min(k, tokens still wanted - 1) tokens:

1. the driver sends one ``speculate`` command to the drafter's and the
   target's workers;
2. the drafter runs k_r greedy steps on its own route: the first feeds every
   token of S its cache does not hold yet (``draft_len`` onwards, so a new
   request's first step is its prompt, like a prefill), the others feed the
   token drafted before; its head rank takes the argmax and sends it back to
   its embed rank(s). It then sends the drafts d_1..d_k to the target's first
   decode hop (the plan's ``draft_tokens`` edge) and to the driver;
3. the target runs one step over k_r + 1 positions per request (the last token
   of S, then the drafts; the paged cache attends causally within the step)
   and returns the logits of every position to the driver;
4. the driver samples position i's token g_i exactly as plain decoding would
   (argmax under greedy; the request's seeded generator otherwise), emits it,
   and continues to position i + 1 only while d_{i+1} == g_i (`verify`). Each
   emitted token is therefore sampled from the target's distribution given
   exactly the tokens emitted before it, in the same order and with the same
   generator draws as without a drafter: greedy tokens equal greedy decoding
   of the target alone, and sampled tokens follow the target's distribution
   (a draft is kept only when it equals the sample, which is lossless though
   it accepts less often than rejection sampling would).

Caches after a verification that accepted a drafts: the target wrote p..p+k;
positions past the last emitted token are stale and the next step overwrites
them (attention only reads a request's positions below its step's end). The
drafter consumed positions up to p + k - 1, of which those up to p + a hold
tokens of S' (`draft_len_after`); the next verification re-feeds the rest.

>>> verify([5, 7, 9], [5, 7, 2, 4], lambda row: (row, False))  # emits 5, 7, 2: two drafts accepted
2
>>> draft_len_after(position=10, k=3, accepted=3), draft_len_after(position=10, k=3, accepted=1)
(13, 12)
>>> round(tokens_per_verification(0.5, 3), 4)
1.875
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from compiler.plan.schema import Plan, Pool, TransferDetail
from compiler.ir.errors import BadInput


@dataclass(frozen=True, slots=True)
class DraftRoute:
    """Where a unit's drafts come from: the drafter replica's route, k, and the plan's ``draft_tokens`` edge."""

    pool: str
    replica: int
    route: tuple  # of compiler.runtime.routes.Hop
    k: int
    detail: TransferDetail
    predicted_acceptance_rate: float | None

    @property
    def ranks(self) -> list[int]:
        return list(dict.fromkeys(r for hop in self.route for r in hop.ranks))


def drafter_of(plan: Plan, target: Pool, replica: int, route_of: Callable) -> DraftRoute | None:
    """The `DraftRoute` of `target`'s replica (None without a draft); `route_of(members, phase)` builds routes."""
    draft = target.draft
    if draft is None:
        return None
    pools = {p.name: p for p in plan.pools}
    drafter = pools.get(draft.pool)
    if drafter is None or drafter.role != "drafter":
        raise BadInput(f"plan: pool {target.name}: draft.pool {draft.pool!r} is not a pool with role drafter; "
                       f"recompile the plan")
    edge = next((t for t in plan.transfers if t.kind == "draft" and t.src_pool == drafter.name), None)
    if edge is None or edge.detail is None:
        raise BadInput(f"plan: drafter pool {drafter.name} has no draft transfer with a detail (what carries the "
                       f"draft tokens); recompile the plan")
    r = replica % drafter.replicas
    return DraftRoute(drafter.name, r, route_of([(drafter.name, r)], "decode"), draft.k, edge.detail,
                      draft.predicted_acceptance_rate)


def verify(drafts: list[int], rows: Iterable, take: Callable) -> int:
    """Emit the target's tokens for one request; return how many drafts were accepted.

    `rows` are the target's logits at positions p .. p + k; ``take(row)`` samples
    and emits that position's token and returns ``(token, finished)``. Position
    i + 1 is used only while draft i equals the token emitted at position i.
    """
    accepted = 0
    for i, row in enumerate(rows):
        token, finished = take(row)
        matched = i < len(drafts) and drafts[i] == token
        accepted += matched
        if finished or not matched:
            break
    return accepted


def draft_len_after(position: int, k: int, accepted: int) -> int:
    """Tokens the drafter's cache holds that are still the request's, after drafting k from `position`.

    It consumed positions up to ``position + k - 1``; the request's tokens agree with them up to
    ``position + accepted`` (the accepted drafts follow the token at `position`).
    """
    return min(position + k, position + 1 + accepted)


def tokens_per_verification(acceptance_rate: float, k: int) -> float:
    """Expected tokens per verification with per-token acceptance rate a: (1 - a^(k+1)) / (1 - a)
    (Leviathan et al., 2023, https://arxiv.org/abs/2211.17192, eq. 1)."""
    a = acceptance_rate
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


@dataclass
class SpecStats:
    """Counts of one unit's verifications (one per request per speculative step)."""

    k: int
    verifications: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    accepted_histogram: dict[int, int] | None = None  # accepted drafts -> verifications

    def add(self, k: int, accepted: int, emitted: int) -> None:
        self.verifications += 1
        self.drafted += k
        self.accepted += accepted
        self.emitted += emitted
        hist = self.accepted_histogram if self.accepted_histogram is not None else {}
        hist[accepted] = hist.get(accepted, 0) + 1
        self.accepted_histogram = hist

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_verification(self) -> float | None:
        return self.emitted / self.verifications if self.verifications else None
