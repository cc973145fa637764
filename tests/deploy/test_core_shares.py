"""How deploy --local shares this host's cores among a plan's engines ([Note: engines sharing this host]),
checked against the rule stated directly: workers apart, and a decoding worker's cores (decode or colocated)
used by nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compiler.deploy.launch import core_shares

ROLES = st.sampled_from(["prefill", "decode", "colocated"])
DECODES = {"decode", "colocated"}  # engines whose steps make tokens a user waits on


def _worker(env: dict[str, str]) -> set[int]:
    return {int(c) for c in env["VLLM_CPU_OMP_THREADS_BIND"].split(",")} if env else set()


@given(st.lists(ROLES, min_size=2, max_size=6), st.integers(2, 16))
def test_workers_apart_and_decode_workers_alone(roles, ncpus):
    cpus = list(range(100, 100 + ncpus))  # not 0..n-1: nothing may assume the host's numbering
    shares = core_shares(roles, cpus=cpus)
    workers = [_worker(env) for env, _rest in shares]
    assert all(w and w <= set(cpus) for w in workers)
    if len(roles) <= ncpus:  # enough cores: no two workers share one
        assert sum(len(w) for w in workers) == len(set().union(*workers))
    others = {c for w, role in zip(workers, roles) if role not in DECODES for c in w}
    decode = {c for w, role in zip(workers, roles) if role in DECODES for c in w}
    for (_env, rest), w in zip(shares, workers):
        assert rest and set(rest) <= set(cpus)
        if decode and others - decode:  # a split: the rest runs where no decode worker does
            assert not set(rest) & decode and set(rest) == others - decode
        else:  # no split: each engine's rest beside its own worker
            assert set(rest) == w


def test_one_engine_is_left_to_vllm():
    assert core_shares(["colocated"], cpus=[0, 1]) == [({}, ())]
