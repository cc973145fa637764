"""Choosing the next token: greedy, or temperature and top-p with a per-request seeded generator.

>>> import torch
>>> sample(torch.tensor([0.1, 2.0, 0.3]), temperature=0.0, top_p=1.0, generator=None)
1
"""

from __future__ import annotations


def sample(logits, *, temperature: float, top_p: float, generator) -> int:
    """Greedy (first maximum, as Hugging Face) when ``temperature == 0``; else nucleus sampling."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, 0) - sorted_probs
        sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=generator))
