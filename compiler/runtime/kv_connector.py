"""The KV-cache transfer interface, modelled on serving engines' KV connectors, and its gloo implementation.

A connector is registered with the worker's caches once (`register_kv_caches`,
like vLLM's), then moves whole requests: `start_send` / `start_load` post the
transfers of one request's pages for the plan's head pairs and return at once;
`wait` blocks until every posted transfer finished and returns the finished
request ids (vLLM: ``get_finished``), storing received pages into the cache.
A real transport (NIXL, UCX, a vendor's RDMA) replaces `GlooKVConnector`
without touching the scheduler: the plan already says what goes where
(`compiler.plan.transfers`), and both ends walk the same pair list in the
same order, which is all two-sided gloo needs.

Each pair carries ``(layers, 2, heads, tokens, head_dim)`` of the sender's
dtype; a receiver whose cache dtype differs casts while storing, which the plan
must list as a conversion step (`compiler.plan.transfers.validate_transfers`).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.runtime.kv_cache import PagedKVCache
from compiler.runtime.wire import KV


@dataclass(frozen=True, slots=True)
class Pair:
    src: int  # rank
    dst: int
    layers: tuple[int, int]
    heads: tuple[int, int]


class KVConnector:
    """Interface; see the module docstring."""

    def register_kv_caches(self, cache: PagedKVCache) -> None:
        raise NotImplementedError

    def start_send(self, request_id: str, length: int, pairs: list[Pair]) -> None:
        raise NotImplementedError

    def start_load(self, request_id: str, length: int, pairs: list[Pair]) -> None:
        raise NotImplementedError

    def wait(self) -> list[str]:
        raise NotImplementedError


class GlooKVConnector(KVConnector):
    def __init__(self, rank: int, head_dim: int, wire_dtype) -> None:
        self.rank = rank
        self.head_dim = head_dim
        self.wire_dtype = wire_dtype
        self.cache: PagedKVCache | None = None
        self.pending: list = []
        self.loads: list = []
        self.requests: list[str] = []
        self.bytes_sent = 0

    def register_kv_caches(self, cache: PagedKVCache) -> None:
        self.cache = cache

    def start_send(self, request_id: str, length: int, pairs: list[Pair]) -> None:
        import torch.distributed as dist

        for p in pairs:
            if p.src != self.rank:
                continue
            kv = self.cache.read(request_id, list(p.layers), list(p.heads), length).to(self.wire_dtype).contiguous()
            self.pending.append((dist.isend(kv, dst=p.dst, tag=KV), kv))
            self.bytes_sent += kv.numel() * kv.element_size()
        self.requests.append(request_id)

    def start_load(self, request_id: str, length: int, pairs: list[Pair]) -> None:
        import torch
        import torch.distributed as dist

        for p in pairs:
            if p.dst != self.rank:
                continue
            buf = torch.empty((p.layers[1] - p.layers[0], 2, p.heads[1] - p.heads[0], length, self.head_dim),
                              dtype=self.wire_dtype)
            self.pending.append((dist.irecv(buf, src=p.src, tag=KV), buf))
            self.loads.append((request_id, p, buf))
        self.requests.append(request_id)

    def wait(self) -> list[str]:
        for work, _ in self.pending:
            work.wait()
        for request_id, p, buf in self.loads:
            self.cache.write_pages(request_id, list(p.layers), list(p.heads), buf)
        done = list(dict.fromkeys(self.requests))
        self.pending, self.loads, self.requests = [], [], []
        return done
