"""The paged KV cache a stage worker keeps for the attention layers it runs.

Pages are ``(kv heads, block_size tokens, head dim)`` per layer, K and V apart
(the ``HND`` layout the plan's transfers name). A request owns a page table
(list of page ids) and a length; `reserve` grows the table, `attend` writes a
step's new K/V into the pages and attends over everything the request holds,
`free` returns the pages. Requests of different lengths share one batch
(continuous batching): the flat tokens of a step are cut per request.

`read` / `write_pages` move a request's KV for a hand-off: the slice of
layers and KV heads a transfer pair carries, ``(layers, 2, heads, tokens, dim)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir.errors import RuntimeFailure


@dataclass(frozen=True, slots=True)
class Seq:
    """One request's part of a step: ``n`` new tokens starting at position ``start``."""

    id: str
    start: int
    n: int


class PagedKVCache:
    def __init__(self, layers: list[int], kv_heads: tuple[int, int], head_dim: int, *, block_size: int,
                 num_pages: int, dtype) -> None:
        import torch

        self.layers = list(layers)
        self.index = {layer: i for i, layer in enumerate(self.layers)}
        self.kv_heads = kv_heads
        self.block_size = block_size
        self.num_pages = num_pages
        heads = kv_heads[1] - kv_heads[0]
        shape = (num_pages, heads, block_size, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in self.layers]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in self.layers]
        self.free_pages = list(range(num_pages - 1, -1, -1))
        self.tables: dict[str, list[int]] = {}
        self.lengths: dict[str, int] = {}

    @property
    def used_fraction(self) -> float:
        return 1.0 - len(self.free_pages) / self.num_pages

    def reserve(self, seq_id: str, length: int) -> None:
        """Make room for `length` tokens of `seq_id`."""
        table = self.tables.setdefault(seq_id, [])
        need = -(-length // self.block_size) - len(table)
        if need > len(self.free_pages):
            raise RuntimeFailure(f"KV cache out of pages ({self.num_pages} pages of {self.block_size} tokens); "
                                 f"lower the batch or the request lengths")
        for _ in range(need):
            table.append(self.free_pages.pop())
        self.lengths[seq_id] = max(self.lengths.get(seq_id, 0), length)

    def free(self, seq_id: str) -> None:
        self.free_pages.extend(reversed(self.tables.pop(seq_id, [])))
        self.lengths.pop(seq_id, None)

    def _where(self, seq_id: str, start: int, n: int):
        import torch

        pos = torch.arange(start, start + n)
        table = torch.tensor(self.tables[seq_id], dtype=torch.long)
        return table[pos // self.block_size], pos % self.block_size

    def _gather(self, pages, seq_id: str, length: int):
        table = self.tables[seq_id]
        used = table[: -(-length // self.block_size)]
        got = pages[used]  # (P, heads, block, dim)
        return got.permute(1, 0, 2, 3).reshape(got.shape[1], -1, got.shape[3])[:, :length]

    def attend(self, layer: int, q, k, v, seqs: list[Seq], *, scale: float | None = None,
               softcap: float | None = None, window: int | None = None, sinks=None):
        """Write each sequence's new k, v and attend its queries over its whole context; q (N, nq, d).

        Options, as Hugging Face's attention functions take them: `scale` of the scores (default 1/sqrt(d)),
        `softcap` (scores -> cap * tanh(scores / cap), Gemma-2), `window` (a query sees the last `window`
        positions, itself included), `sinks` (one logit per query head joining the softmax, gpt-oss).
        """
        import torch
        import torch.nn.functional as F

        li = self.index[layer]
        out = torch.empty_like(q)
        offset = 0
        groups = q.shape[1] // k.shape[1]
        for s in seqs:
            rows = slice(offset, offset + s.n)
            page, slot = self._where(s.id, s.start, s.n)
            self.k[li][page, :, slot, :] = k[rows]
            self.v[li][page, :, slot, :] = v[rows]
            total = s.start + s.n
            keys = self._gather(self.k[li], s.id, total).repeat_interleave(groups, dim=0)
            values = self._gather(self.v[li], s.id, total).repeat_interleave(groups, dim=0)
            query = q[rows].transpose(0, 1)
            if softcap is not None or sinks is not None:
                o = _explicit_attention(query, keys, values, _visible(s, window), scale, softcap, sinks)[None]
            elif window is not None:
                o = F.scaled_dot_product_attention(query[None], keys[None], values[None], attn_mask=_visible(s, window),
                                                   scale=scale)
            elif s.n == 1:
                o = F.scaled_dot_product_attention(query[None], keys[None], values[None], scale=scale)
            elif s.start == 0:
                o = F.scaled_dot_product_attention(query[None], keys[None], values[None], is_causal=True, scale=scale)
            else:
                o = F.scaled_dot_product_attention(query[None], keys[None], values[None], attn_mask=_visible(s, None),
                                                   scale=scale)
            out[rows] = o[0].transpose(0, 1)
            offset += s.n
        return out

    def read(self, seq_id: str, layers: list[int], heads: list[int], length: int):
        """K and V of `layers` x global KV `heads` for `length` tokens: (layers, 2, heads, tokens, dim)."""
        import torch

        h0, h1 = heads[0] - self.kv_heads[0], heads[1] - self.kv_heads[0]
        parts = []
        for layer in range(*layers):
            li = self.index[layer]
            parts.append(torch.stack([self._gather(self.k[li], seq_id, length)[h0:h1],
                                      self._gather(self.v[li], seq_id, length)[h0:h1]]))
        return torch.stack(parts).contiguous()

    def write_pages(self, seq_id: str, layers: list[int], heads: list[int], kv) -> None:
        """Store a received (layers, 2, heads, tokens, dim) block into this request's pages."""
        length = kv.shape[3]
        self.reserve(seq_id, length)
        page, slot = self._where(seq_id, 0, length)
        h0, h1 = heads[0] - self.kv_heads[0], heads[1] - self.kv_heads[0]
        for j, layer in enumerate(range(*layers)):
            li = self.index[layer]
            self.k[li][page, h0:h1, slot, :] = kv[j, 0].transpose(0, 1).to(self.k[li].dtype)
            self.v[li][page, h0:h1, slot, :] = kv[j, 1].transpose(0, 1).to(self.v[li].dtype)


def _visible(s: Seq, window: int | None):
    """(n, start + n) mask: query position i sees key position j <= i (and i - j < window)."""
    import torch

    total = s.start + s.n
    key_pos, query_pos = torch.arange(total)[None, :], torch.arange(s.start, total)[:, None]
    visible = key_pos <= query_pos
    return visible if window is None else visible & (query_pos - key_pos < window)


def _explicit_attention(query, keys, values, visible, scale, softcap, sinks):
    """Attention written out, for score transforms SDPA lacks; query (heads, n, d) -> (heads, n, d)."""
    import math

    import torch

    scores = torch.matmul(query, keys.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(query.shape[-1]))
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        logits = torch.cat([scores, sinks.to(scores.dtype).reshape(-1, 1, 1).expand(-1, scores.shape[1], 1)], dim=-1)
        probs = torch.softmax(logits - logits.max(dim=-1, keepdim=True).values, dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs.to(values.dtype), values)
