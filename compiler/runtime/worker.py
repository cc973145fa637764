"""A stage worker: ``python -m compiler.runtime.worker --plan DIR`` (the contract: compiler/plan/topology.py).

The worker verifies the plan directory's hashes, finds its rank from the
environment, joins the process group, loads its stage program and weight
shard, and then executes the driver's commands in order until ``stop``:

- ``step``: run this worker's hops of a route (prefill or decode) for a batch
  of requests: receive hidden states from the previous hop (or embed the token
  ids), run the blocks, send to the next hop (or the last tokens' logits to
  the driver);
- ``speculate``: one verification of speculative decoding: drafter workers
  draft k tokens per request on their own route and send them to the
  target's first decode hop and the driver; target workers verify k + 1
  positions per request in one step and send every position's logits to the
  driver ([Note: speculative decoding] in compiler/runtime/speculative.py);
- ``handoff``: send or receive requests' KV pages for the plan's head pairs
  (`compiler.runtime.kv_connector`), then free the sender's copy;
- ``free``: release finished requests' pages; ``stats``: report measured
  compute time and bytes; ``stop``: leave.

Every command is answered on the ``ACK`` tag, so the driver knows which stage
failed or hangs. An exception is reported to the driver before exiting 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import traceback
from typing import Any

from compiler.plan.manifest import verified_text
from compiler.emit.stage_programs import shape_of
from compiler.plan.topology import worker_table, world_size
from compiler.ir.errors import BadInput
from compiler.ir.precision import TORCH_DTYPES
from compiler.runtime.kv_cache import PagedKVCache, Seq
from compiler.runtime.launch import READY_PREFIX, pin_gloo_to_loopback
from compiler.runtime.kv_connector import GlooKVConnector, Pair
from compiler.runtime.plan_dir import PlanDir, open_plan_dir
from compiler.runtime.stage_runner import StageRunner, load_program
from compiler.runtime.wire import ACK, CONTROL, DATA, DRAFT, recv_json, send_json

#: Workers wait as long as it takes for the driver's next command; the driver times out hung peers.
WORKER_TIMEOUT_S = float(os.environ.get("GIMLETC_WORKER_TIMEOUT_S", 7 * 24 * 3600))


def tp_groups(plan) -> dict[tuple[int, ...], Any]:
    """Create every tensor-parallel group (every process calls this, in the same order)."""
    import torch.distributed as dist

    groups = {}
    stage_ranks: dict[tuple[str, int, int], list[int]] = {}
    for w in worker_table(plan):
        stage_ranks.setdefault((w.pool, w.replica, w.stage), []).append(w.rank)
    for ranks in stage_ranks.values():
        if len(ranks) > 1:
            groups[tuple(ranks)] = dist.new_group(ranks)
    return groups


def kv_pages(config: dict, batch: int, block_size: int) -> int:
    max_len = int(config.get("max_position_embeddings", 2048))
    return max(1, min(batch, 64)) * -(-max_len // block_size) + 1


class StageWorker:
    def __init__(self, plan_dir: PlanDir, rank: int, groups: dict) -> None:
        import torch
        from safetensors.torch import load_file

        self.pd = plan_dir
        self.rank = rank
        self.table = {w.rank: w for w in worker_table(plan_dir.plan)}
        self.me = self.table[rank]
        pool = next(p for p in plan_dir.plan.pools if p.name == self.me.pool)
        self.exe = pool.stages[self.me.stage].execution
        rx = self.exe.ranks[self.me.tp_rank]
        self.dtype = getattr(torch, TORCH_DTYPES[self.exe.dtype])
        config = plan_dir.config_of(pool.name)
        shape = shape_of(config)
        self.hidden, head_dim = shape.hidden, shape.head_dim
        namespace = load_program(verified_text(plan_dir.root, rx.program, plan_dir.manifest), rx.program)
        weights = load_file(str(plan_dir.root / rx.weights))
        attn_layers = sorted(int(b[1:].split(".")[0]) for b in namespace["BLOCKS"] if b.endswith(".attn"))
        cache = None
        if attn_layers:
            cache = PagedKVCache(attn_layers, tuple(rx.kv_heads), head_dim, block_size=self.exe.kv_block_size,
                                 num_pages=kv_pages(config, pool.batch, self.exe.kv_block_size),
                                 dtype=getattr(torch, TORCH_DTYPES[self.exe.kv_dtype]))
        group = next((g for ranks, g in groups.items() if rank in ranks), None)
        self.runner = StageRunner(namespace, weights, cache, group)
        self.connector = GlooKVConnector(rank, head_dim, self.dtype)
        if cache is not None:
            self.connector.register_kv_caches(cache)
        self.compute_s: dict[str, float] = {}
        self.bytes: dict[str, int] = {}
        self.steps = 0

    def serve(self) -> None:
        handlers = {"step": self.step, "speculate": self.speculate, "handoff": self.handoff, "free": self.free,
                    "stats": self.stats, "ping": lambda cmd: {}, "stop": lambda cmd: {}}
        while True:
            cmd = recv_json(0, CONTROL)
            reply = handlers[cmd["op"]](cmd)
            send_json({"ok": True, **reply}, 0, ACK)
            if cmd["op"] == "stop":
                return

    def _count(self, kind: str, tensor) -> None:
        self.bytes[kind] = self.bytes.get(kind, 0) + tensor.numel() * tensor.element_size()

    def _pass(self, route: list[dict], seqs: list[Seq], ids, phase: str):
        """Run this worker's hops of `route` on a batch: `ids` (token ids) enter the first hop, hidden states go
        from hop to hop; returns the last hop's output (every row) on the rank that computes it, else None."""
        import torch
        import torch.distributed as dist

        total = sum(s.n for s in seqs)
        positions = torch.cat([torch.arange(s.start, s.start + s.n) for s in seqs])
        if self.runner.cache is not None:
            for s in seqs:
                self.runner.cache.reserve(s.id, s.start + s.n)
        before, out = self.runner.compute_s, None
        for i, hop in enumerate(route):
            if self.rank not in hop["ranks"]:
                continue
            if i == 0:
                first = ids
            else:
                first = torch.empty(total, self.hidden, dtype=self.dtype)
                dist.recv(first, src=route[i - 1]["ranks"][0], tag=DATA)
            x = self.runner.run(hop["blocks"], first, positions, seqs)
            if hop["ranks"].index(self.rank) != 0:
                continue
            if i == len(route) - 1:
                out = x
                continue
            x = x.contiguous()
            for r in route[i + 1]["ranks"]:
                dist.send(x, dst=r, tag=DATA)
                crossing = self.table[r].pool != self.me.pool
                self._count("hidden_states" if crossing else "pipeline_hidden_states", x)
        self.compute_s[phase] = self.compute_s.get(phase, 0.0) + self.runner.compute_s - before
        return out

    def step(self, cmd: dict) -> dict:
        import torch
        import torch.distributed as dist

        seqs = [Seq(s["id"], s["start"], s["n"]) for s in cmd["seqs"]]
        ids = torch.tensor(cmd["ids"], dtype=torch.long) if self.rank in cmd["route"][0]["ranks"] else None
        x = self._pass(cmd["route"], seqs, ids, cmd["phase"])
        if x is not None:
            last = torch.cumsum(torch.tensor([s.n for s in seqs]), 0) - 1
            dist.send(x[last].float().contiguous(), dst=0, tag=DATA)
        self.steps += 1
        return {}

    def speculate(self, cmd: dict) -> dict:
        if any(self.rank in hop["ranks"] for hop in cmd["draft_route"]):
            self._draft(cmd)
        else:
            self._verify(cmd)
        self.steps += 1
        return {}

    def _draft(self, cmd: dict) -> None:
        """Draft each request's k tokens greedily on the drafter's route; the head rank feeds each token back to
        the embed rank(s), then sends all drafts to the target's first hop and the driver."""
        import torch
        import torch.distributed as dist

        route, head = cmd["draft_route"], cmd["draft_route"][-1]["ranks"][0]
        embeds = route[0]["ranks"]
        active = [s for s in cmd["seqs"] if s["k"] > 0]
        drafts: dict[str, list[int]] = {s["id"]: [] for s in active}
        seqs = [Seq(s["id"], s["draft_len"], s["position"] + 1 - s["draft_len"]) for s in active]
        ids = torch.tensor(cmd["draft_ids"], dtype=torch.long)
        for j in range(max(s["k"] for s in active)):
            if j > 0:
                active = [s for s in active if s["k"] > j]
                seqs = [Seq(s["id"], s["position"] + j, 1) for s in active]
                if self.rank == head:
                    ids = torch.tensor([drafts[s["id"]][-1] for s in active], dtype=torch.long)
                elif self.rank in embeds:  # the token the head just drafted
                    ids = torch.empty(len(active), dtype=torch.long)
                    dist.recv(ids, src=head, tag=DATA)
            x = self._pass(route, seqs, ids if self.rank in embeds else None, "decode")
            if self.rank != head:
                continue
            last = torch.cumsum(torch.tensor([s.n for s in seqs]), 0) - 1
            for s, token in zip(active, x[last].float().argmax(dim=-1).tolist()):
                drafts[s["id"]].append(token)
            ahead = torch.tensor([drafts[s["id"]][-1] for s in active if s["k"] > j + 1], dtype=torch.long)
            if len(ahead):
                for r in embeds:
                    if r != head:
                        dist.send(ahead, dst=r, tag=DATA)
        if self.rank == head:
            flat = torch.tensor([t for s in cmd["seqs"] for t in drafts.get(s["id"], [])], dtype=torch.long)
            for r in cmd["route"][0]["ranks"]:
                dist.send(flat, dst=r, tag=DRAFT)
                self._count("draft_tokens", flat)
            dist.send(flat, dst=0, tag=DRAFT)

    def _verify(self, cmd: dict) -> None:
        """One target step over each request's last token and its k drafts; every position's logits to the driver."""
        import torch
        import torch.distributed as dist

        seqs = [Seq(s["id"], s["position"], s["k"] + 1) for s in cmd["seqs"]]
        ids = None
        if self.rank in cmd["route"][0]["ranks"]:
            flat = torch.empty(sum(s["k"] for s in cmd["seqs"]), dtype=torch.long)
            dist.recv(flat, src=cmd["draft_route"][-1]["ranks"][0], tag=DRAFT)
            parts, offset = [], 0
            for s, last in zip(cmd["seqs"], cmd["ids"]):
                parts.append(torch.cat([torch.tensor([last]), flat[offset:offset + s["k"]]]))
                offset += s["k"]
            ids = torch.cat(parts)
        x = self._pass(cmd["route"], seqs, ids, "decode")
        if x is not None:
            dist.send(x.float().contiguous(), dst=0, tag=DATA)

    def handoff(self, cmd: dict) -> dict:
        pairs = [Pair(p["src"], p["dst"], tuple(p["layers"]), tuple(p["heads"])) for p in cmd["pairs"]]
        sending = any(p.src == self.rank for p in pairs)
        sent = self.connector.bytes_sent
        for s in cmd["seqs"]:
            if sending:
                self.connector.start_send(s["id"], s["len"], pairs)
            else:
                self.connector.start_load(s["id"], s["len"], pairs)
        done = self.connector.wait()
        if sending:
            self.bytes["kv_pages"] = self.bytes.get("kv_pages", 0) + self.connector.bytes_sent - sent
            for request_id in done:
                self.runner.cache.free(request_id)
        return {}

    def free(self, cmd: dict) -> dict:
        if self.runner.cache is not None:
            for request_id in cmd["ids"]:
                self.runner.cache.free(request_id)
        return {}

    def stats(self, cmd: dict) -> dict:
        cache = self.runner.cache
        return {"compute_s": self.compute_s, "bytes": self.bytes, "steps": self.steps,
                "kv_used": cache.used_fraction if cache is not None else None}


def _die_with_parent() -> None:
    """Locally spawned workers get SIGKILL when the driver dies (Linux); pods rely on the group restart policy."""
    if os.environ.get("GIMLETC_PARENT_DEATH") != "1" or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _rendezvous(rank: int, world: int) -> None:
    """Connect to the driver's store, say this worker is ready, join the process group ([Note: rendezvous] in
    compiler/runtime/launch.py). The store client retries until the driver listens."""
    import torch.distributed as dist

    try:
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except KeyError as e:
        raise BadInput(f"environment variable {e.args[0]} is not set; a worker needs MASTER_ADDR and MASTER_PORT "
                       f"(see compiler/plan/topology.py)") from None
    except ValueError:
        raise BadInput(f"MASTER_PORT={os.environ['MASTER_PORT']!r}: give a port number") from None
    pin_gloo_to_loopback(addr)
    timeout = datetime.timedelta(seconds=WORKER_TIMEOUT_S)
    store = dist.TCPStore(addr, port, world, is_master=False, timeout=timeout)
    store.set(f"{READY_PREFIX}{rank}", "1")
    print(f"gimletc-worker: rank {rank} ready; joining the process group", flush=True)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.runtime.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="the plan directory (gimletc compile --out DIR)")
    args = parser.parse_args(argv)
    _die_with_parent()
    import torch

    from compiler.plan.topology import rank_from_env

    torch.set_num_threads(int(os.environ.get("GIMLETC_THREADS", "1")))
    plan_dir = open_plan_dir(args.plan)
    rank = rank_from_env(plan_dir.plan)
    _rendezvous(rank, world_size(plan_dir.plan))
    try:
        groups = tp_groups(plan_dir.plan)
        StageWorker(plan_dir, rank, groups).serve()
    except Exception as e:  # report to the driver, then fail
        traceback.print_exc()
        try:
            send_json({"ok": False, "error": f"{type(e).__name__}: {e}"}, 0, ACK)
        except Exception:
            pass
        return 1
    # The driver has our last reply and is taking the group down; skip tearing down gloo and torch's interpreter
    # shutdown (seconds on a loaded machine, times every worker, on every close).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
