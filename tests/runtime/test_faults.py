"""A worker killed mid-run ends the run with a clear error naming its stage, fast, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.runtime.conftest import PROMPTS


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_killing_a_worker_mid_run_fails_fast_naming_the_stage(llama_split):
    from compiler.ir.errors import RuntimeFailure
    from compiler.runtime.engine import Engine, Request

    engine = Engine(llama_split)
    pids = engine.workers.pids()
    victim = next(w for w in engine.table.values() if w.pool == "ffn")
    engine.run([Request(PROMPTS[0], max_new_tokens=2)])  # warm: the run is live
    killer = threading.Timer(0.5, lambda: os.kill(engine.workers.procs[victim.rank].pid, signal.SIGKILL))
    start = time.monotonic()
    killer.start()
    with pytest.raises(RuntimeFailure) as err:
        engine.run([Request(p, max_new_tokens=400, ignore_eos=True) for p in PROMPTS])
    elapsed = time.monotonic() - start
    assert elapsed < 30
    assert f"stage {victim.name}" in str(err.value) and "died" in str(err.value)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


@pytest.mark.timeout(120)
def test_a_hung_worker_is_named_within_the_stage_timeout(llama_split):
    from compiler.ir.errors import RuntimeFailure
    from compiler.runtime.engine import Engine, Request

    engine = Engine(llama_split, stage_timeout_s=4)
    pids = engine.workers.pids()
    victim = next(w for w in engine.table.values() if w.pool == "attn")
    os.kill(engine.workers.procs[victim.rank].pid, signal.SIGSTOP)
    start = time.monotonic()
    with pytest.raises(RuntimeFailure, match="did not answer") as err:
        engine.run([Request(PROMPTS[1], max_new_tokens=4)])
    assert time.monotonic() - start < 30
    assert "stage " in str(err.value)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    time.sleep(1)
    assert not any(_alive(p) for p in pids)
