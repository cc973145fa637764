"""The static shapes an engine compiled its programs for (Neuron), and what they pad a step to; see
[Note: buckets]. Arithmetic only: `Buckets.pad` pads any batch with prefill and decode fields (`cost_models.steps.Batch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol, Sequence, TypeVar


class _Padded(Protocol):
    prefill_tokens: float
    prefill_requests: float
    prefill_before: bool
    decodes: float
    context: float


B = TypeVar("B", bound=_Padded)


#: A bucket gimletc adds for a class is rounded up to a multiple of this many tokens (assumption: 128, the automatic
#: buckets' smallest, keeps the compiled shapes tile-aligned; NxD accepts any length).
BUCKET_ALIGN = 128


@dataclass(frozen=True, slots=True)
class Buckets:
    """The sequence lengths an engine compiled its programs for; see [Note: buckets].

    [Note: buckets] The Neuron compiler builds programs for static shapes, so
    NxD Inference (alone, and under vLLM through the vllm-neuron plugin)
    compiles one context-encoding program per prompt length in ``context`` and
    one token-generation program per sequence length in ``token``, and runs
    each request in the smallest that holds it, padded (feature guide,
    "Bucketing": https://github.com/aws-neuron/aws-neuron-sdk/blob/81ce03ae261e12925e53437a0f690478e6366155/
    libraries/nxd-inference/developer_guides/feature-guide.rst).
    A step computes a prompt at its context bucket's length and, decoding,
    attends over its token bucket's. Without lists the buckets are automatic:
    powers of two from 128 up to the longest sequence, and that length.

    Llama-3.3-70B's 10,000-token prompt on 16 Trainium2 ran in the 12,288
    program (V079's launch, cost_models/data/neuron_buckets.csv) and measured
    814 ms; padded, the fitted model predicts 851 ms, and 693 ms for the
    10,000 tokens alone. A 2,304-token decode context would run in the 4,096
    program (1.8x the KV read), so gimletc's own launch adds a bucket at each
    class's mean lengths (`Buckets.for_classes`, written by
    `compiler.emit.serving.launch`), and the placement costs that launch.

    Not modelled: a decode is padded at its mean context (a request crossing a
    bucket reads less before it); a chunk after cached tokens is not padded
    (NxD runs a prompt whole, `Buckets.budget`); the KV cache is sized by the
    tokens held, where NxD reserves a slot's whole sequence length.
    """

    context: tuple[int, ...]  # ascending (sorted here once, not at each padded step)
    token: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", tuple(sorted(self.context)))
        object.__setattr__(self, "token", tuple(sorted(self.token)))

    @classmethod
    def automatic(cls, max_len: int) -> "Buckets":
        """NxD Inference's automatic bucketing for sequences of at most `max_len` tokens (vLLM's
        ``--max-model-len``): powers of two from 128 below it, and `max_len` itself, for both programs."""
        lengths = tuple(1 << k for k in range(7, max(7, max_len.bit_length())) if 1 << k < max_len) + (max_len,)
        return cls(lengths, lengths)

    @classmethod
    def for_classes(cls, max_len: int, prompts: Sequence[float], sequences: Sequence[float]) -> "Buckets":
        """The buckets gimletc launches a Neuron pool with: the automatic ones for `max_len`, a context bucket at
        each class's mean prompt (`prompts`) and a token bucket at each one's mean prompt + output (`sequences`),
        rounded up to `BUCKET_ALIGN` tokens, so a request of a class's mean lengths is not padded to the next
        power of two (a 2,304-token decode context would be, 1.8x, by automatic buckets alone)."""
        auto = cls.automatic(max_len)
        align = lambda ts: tuple(min(max_len, -(-math.ceil(t) // BUCKET_ALIGN) * BUCKET_ALIGN) for t in ts)  # noqa: E731
        return cls(tuple({*auto.context, *align(prompts)}), tuple({*auto.token, *align(sequences)}))

    @staticmethod
    def fit(length: float, buckets: tuple[int, ...]) -> float:
        """The smallest of ascending `buckets` holding `length` tokens; `length` itself beyond the largest."""
        return float(next((b for b in buckets if b >= length), length))

    @property
    def budget(self) -> int:
        """Prompt tokens one step runs: the largest context bucket, so a prompt runs whole, never chunked."""
        return self.context[-1]

    def pad(self, batch: B) -> B:
        """`batch` as the compiled programs compute it: whole prompts at their context bucket, decodes over their
        token bucket."""
        prefill = batch.prefill_tokens
        if prefill and not batch.prefill_before:
            prefill = batch.prefill_requests * self.fit(prefill / batch.prefill_requests, self.context)
        context = self.fit(batch.context, self.token) if batch.decodes else batch.context
        return replace(batch, prefill_tokens=prefill, context=context)
