"""A predicted pipeline timeline of a plan, as Chrome trace JSON (opens in https://ui.perfetto.dev or
chrome://tracing).

One request of the workload's mean shape walks each serving path of the plan: a colocated pool alone, or a
prefill pool handing its KV to a decode pool (`Transfer` kind ``kv``). Its prefill runs through the pipeline
stages of the prefill (or colocated) pool, the KV hand-off takes the transfer's predicted latency, then
`DECODE_STEPS` decode steps run through the decode pool's stages; a decode pool split into attention and FFN
halves alternates them layer by layer. Each stage's time is the sum of its blocks' roofline times at the
operating point of `compiler.emit.report.roofline` (a prefill of one mean prompt; a decode step at the pool's
batch). Queueing is not drawn: the plan's percentile latencies (summary.md) include it. Paths follow one
another in time so no track shows two requests at once.

Format (the Trace Event Format that Perfetto imports): ``{"traceEvents": [...], "displayTimeUnit": "ms"}``;
complete events ``ph: "X"`` with ``ts`` and ``dur`` in microseconds, ``pid`` one per pool (plus one for
transfers), ``tid`` one per pipeline stage; metadata events ``ph: "M"`` name them.
"""

from __future__ import annotations

from compiler.plan.schema import Plan, Pool
from compiler.emit.report.roofline import POOL_ROLES, deployment_of, operating_point
from compiler.ir.block_graph import BlockGraph
from cost_models.roofline import block_time
from cost_models.serving import memory_plan

#: Decode steps drawn per request (enough to show the steady state, few enough to read).
DECODE_STEPS = 3


class _Trace:
    """Events in the making: pids per pool, a clock per path."""

    def __init__(self, plan: Plan, graph: BlockGraph) -> None:
        self.plan, self.graph = plan, graph
        self.events: list[dict] = []
        self.pid = {p.name: i + 1 for i, p in enumerate(plan.pools)}
        self.transfer_pid = len(plan.pools) + 1
        self.pools = {p.name: p for p in plan.pools}

    def add(self, name: str, cat: str, start_us: float, dur_us: float, pid: int, tid: int, **args) -> float:
        end_us = start_us + max(dur_us, 0.0)
        ts, end = round(start_us, 3), round(end_us, 3)  # round the ends, so an event starts where the last ended
        self.events.append({"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": round(end - ts, 3), "pid": pid,
                            "tid": tid, "args": {"prediction": True, **args}})
        return end_us

    def block_s(self, pool: Pool, phase: str, names: list[str]) -> float:
        """Roofline time of `names` (blocks of `phase`) on one replica of `pool` at its operating point."""
        dep = deployment_of(self.plan, pool)
        point = operating_point(self.plan, pool, phase)
        kv_hint = self.graph.kv_bytes_per_sequence(point.get("L", point.get("S", 1.0)), dep.precision) \
            * point["B"] / dep.group
        mem = memory_plan(self.graph, dep, kv_hint, POOL_ROLES.get(pool.role))
        total = 0.0
        alike: dict[tuple, float] = {}  # identical layers cost the same: each kind is costed once
        for name in names:
            try:
                b = self.graph.block(name, phase)
            except KeyError:
                continue
            kind = (b.role, b.ops, b.attention, b.window_tokens, b.experts, b.experts_per_token)
            if kind not in alike:
                alike[kind] = block_time(b, point, dep.device, precision=dep.precision, derate=dep.derate,
                                         shards=dep.tp, tiers=mem.weight_tiers, kv_tiers=mem.kv_tiers).time_s
            total += alike[kind]
        return total

    def stages(self, pool: Pool, phase: str, start_us: float, label: str) -> float:
        """One pass of `phase` through `pool`'s pipeline stages; returns when it ends."""
        t = start_us
        for stage in pool.stages:
            names = [n.split("/", 1)[1] for n in stage.blocks if n.startswith(f"{phase}/")]
            if not names:
                continue
            dur = self.block_s(pool, phase, names) * 1e6
            t = self.add(f"{label} {names[0]}..{names[-1]}", phase, t, dur, self.pid[pool.name], stage.index,
                         blocks=len(names), point=_point(operating_point(self.plan, pool, phase)))
        return t

    def split_decode(self, attn: Pool, ffn: Pool, start_us: float, label: str) -> float:
        """One decode step alternating attention (on `attn`) and FFN (on `ffn`) layer by layer."""
        names = [n.split("/", 1)[1] for s in ffn.stages for n in s.blocks if n.startswith("decode/")]
        attn_names = [n.split("/", 1)[1] for s in attn.stages for n in s.blocks if n.startswith("decode/")]
        t = start_us
        embed = [n for n in names if not n.startswith("L")][:1]
        if embed:
            t = self.add(f"{label} {embed[0]}", "decode", t, self.block_s(ffn, "decode", embed) * 1e6,
                         self.pid[ffn.name], 0)
        for a in attn_names:
            layer = a.split(".")[0]
            t = self.add(f"{label} {a}", "decode", t, self.block_s(attn, "decode", [a]) * 1e6,
                         self.pid[attn.name], 0)
            rest = [n for n in names if n.split(".")[0] == layer]
            if rest:
                t = self.add(f"{label} {'+'.join(rest)}", "decode", t,
                             self.block_s(ffn, "decode", rest) * 1e6, self.pid[ffn.name], 0)
        head = [n for n in names if not n.startswith("L")][1:]
        if head:
            t = self.add(f"{label} {head[-1]}", "decode", t, self.block_s(ffn, "decode", head) * 1e6,
                         self.pid[ffn.name], 0)
        return t

    def metadata(self) -> list[dict]:
        out = []
        for p in self.plan.pools:
            pid = self.pid[p.name]
            out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                        "args": {"name": f"{p.name} ({p.role}, {p.device}, tp{p.tp} pp{p.pp}, batch {p.batch})"}})
            out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
            for s in p.stages:
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": s.index,
                            "args": {"name": f"stage {s.index}"}})
        out.append({"name": "process_name", "ph": "M", "pid": self.transfer_pid, "tid": 0,
                    "args": {"name": "KV hand-offs"}})
        return out


def _point(point: dict[str, float]) -> str:
    return " ".join(f"{k}={v:g}" for k, v in sorted(point.items()))


def serving_paths(plan: Plan) -> list[tuple[Pool, Pool | None, float]]:
    """(prefill or colocated pool, decode pool or None, hand-off ms) for every way a request is served."""
    pools = {p.name: p for p in plan.pools}
    out: list[tuple[Pool, Pool | None, float]] = [(p, None, 0.0) for p in plan.pools if p.role == "colocated"]
    for t in plan.transfers:
        if t.kind == "kv" and t.src_pool in pools and t.dst_pool in pools:
            out.append((pools[t.src_pool], pools[t.dst_pool], t.predicted_latency_ms))
    return out


def pipeline_trace(plan: Plan, graph: BlockGraph) -> dict:
    """The Chrome trace of one mean request per serving path (see the module docstring)."""
    tr = _Trace(plan, graph)
    ffn_of = {t.src_pool: tr.pools[t.dst_pool] for t in plan.transfers
              if t.kind == "activation" and t.dst_pool in tr.pools}
    t = 0.0
    for i, (first, decode, handoff_ms) in enumerate(serving_paths(plan)):
        label = f"request {i}"
        t = tr.stages(first, "prefill", t, f"{label} prefill")
        if decode is not None:
            t = tr.add(f"{label} KV {first.name} -> {decode.name}", "kv", t, handoff_ms * 1e3, tr.transfer_pid, 0)
        decoder = decode or first
        for step in range(DECODE_STEPS):
            if decoder.role == "decode-attention" and decoder.name in ffn_of:
                t = tr.split_decode(decoder, ffn_of[decoder.name], t, f"{label} decode {step}")
            else:
                t = tr.stages(decoder, "decode", t, f"{label} decode {step}")
        t += 1e3  # a millisecond between paths
    return {"traceEvents": tr.metadata() + tr.events, "displayTimeUnit": "ms",
            "otherData": {"gimletc": "predicted pipeline timeline (roofline step times at each pool's operating "
                                     "point; queueing not drawn)", "plan_model": plan.model}}
