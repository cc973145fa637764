"""Choosing the next token: greedy, or temperature and top-p with a per-request seeded generator.

`sampling_problems` is the check every entry point (HTTP, ``gimletc run``, `Engine.submit`) applies before a request
runs, so that a value outside the ranges below never reaches `sample`. `logprobs` gives the log-probabilities that
OpenAI's ``logprobs`` fields report: of the model's distribution (before temperature and top-p, as vLLM reports them).

>>> import torch
>>> sample(torch.tensor([0.1, 2.0, 0.3]), temperature=0.0, top_p=1.0, generator=None)
1
>>> sampling_problems(temperature=-1.0, top_p=0.0)
['temperature -1.0: give 0 (greedy) or a positive number', 'top_p 0.0: give a number in (0, 1]']
"""

from __future__ import annotations

import math

#: Log-probabilities are finite in JSON: -inf (a token of probability 0 in float32) is reported as this.
LOGPROB_FLOOR = -9999.0


def sampling_problems(*, temperature: float, top_p: float) -> list[str]:
    """What is wrong with these sampling parameters, one line each; empty when they can run."""
    problems = []
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        problems.append(f"temperature {temperature!r}: give 0 (greedy) or a positive number")
    if not (isinstance(top_p, (int, float)) and math.isfinite(top_p) and 0 < top_p <= 1):
        problems.append(f"top_p {top_p!r}: give a number in (0, 1]")
    return problems


def sample(logits, *, temperature: float, top_p: float, generator) -> int:
    """Greedy (first maximum, as Hugging Face) when ``temperature == 0``; else nucleus sampling, which always keeps
    the most likely token (so a tiny `top_p` is greedy rather than an empty distribution), and a temperature so
    small that the scaled logits overflow is greedy too (its limit), not a NaN distribution.

    >>> import torch
    >>> sample(torch.tensor([0.0, 1.0]), temperature=1e-300, top_p=1.0, generator=None)
    1
    """
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    scaled = logits.float() / temperature
    if not bool(torch.isfinite(scaled).all()):  # a temperature so small the logits overflow: the limit is greedy
        return int(torch.argmax(logits))
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, 0) - sorted_probs
        keep = before < top_p
        keep[0] = True
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=generator))


def logprobs(logits, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of `token` and the `top` most likely tokens with theirs, under softmax(`logits`).

    >>> import torch
    >>> lp, best = logprobs(torch.tensor([0.0, 0.0]), 1, top=1)
    >>> round(lp, 4), [(t, round(p, 4)) for t, p in best]
    (-0.6931, [(0, -0.6931)])
    """
    import torch

    lp = torch.log_softmax(logits.float(), dim=-1).clamp(min=LOGPROB_FLOOR)
    best = torch.topk(lp, min(top, lp.numel())) if top > 0 else None
    pairs = [] if best is None else [(int(i), float(v)) for v, i in zip(best.values, best.indices)]
    return float(lp[token]), pairs
