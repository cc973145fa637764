"""Prefill and decode exported in two processes give the graph one process gives ([Note: concurrent phases])."""

import os
import sys

import pytest

from compiler.inputs.model_spec import resolve_model
from compiler.ir.errors import UnsupportedModel
from compiler.trace import concurrent
from compiler.trace.export import quiet_export_logs

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(sys.platform != "linux", reason="the concurrent path forks (Linux only)")]


@pytest.fixture(autouse=True)
def _own_threads_only(monkeypatch):
    """The trace forks only in a process running one thread. Under pytest-xdist this process also runs the
    worker's own I/O threads, started before any test: count only the threads beyond those, so each test sees the
    process as a single-threaded compile would be (a thread a test starts still counts)."""
    import threading

    before = threading.active_count()
    monkeypatch.setattr(concurrent.threading, "active_count", lambda: len(threading.enumerate()) - before + 1)


@pytest.fixture(scope="module")
def one_process():
    """`one_process(name)`: the JSON of the model's graph traced in this process alone (the reference every test
    here compares with), traced once per module."""
    memo = {}

    def get(name: str) -> str:
        if name not in memo:
            with quiet_export_logs():
                memo[name] = concurrent.traced_graph(resolve_model(name), concurrent=False).dumps()
        return memo[name]

    return get


@pytest.mark.parametrize("name", ("llama-tiny", "gpt-oss-tiny",
                                  # routed experts again, without gpt-oss's sliding layers and sinks: two more
                                  # traces, 7-10 s on 2 cores (CI runs -m slow)
                                  pytest.param("qwen3-moe-tiny", marks=pytest.mark.slow)))
def test_two_processes_give_the_byte_identical_graph(name, monkeypatch, one_process):
    reference = one_process(name)
    received = []
    real = concurrent._received
    monkeypatch.setattr(concurrent, "_received", lambda *a: received.append(real(*a)) or received[-1])
    spec = resolve_model(name)
    with quiet_export_logs():
        assert concurrent.traced_graph(spec).dumps() == reference
    assert len(received) == 1 and received[0] is not None  # decode came from the child


def test_a_child_that_dies_costs_only_time(monkeypatch, one_process):
    reference = one_process("llama-tiny")
    monkeypatch.setattr(concurrent, "_export_decode_in_child", lambda *_a: os._exit(3))
    spec = resolve_model("llama-tiny")
    with quiet_export_logs():
        graph = concurrent.traced_graph(spec)
    assert graph.dumps() == reference


def test_the_childs_unsupported_model_is_raised_by_the_parent(monkeypatch):
    real = concurrent.export_phase

    def decode_fails(traced, model, phase, *args):
        if phase == "decode":
            raise UnsupportedModel("model X decode: torch.export failed (made up for this test)")
        return real(traced, model, phase, *args)

    monkeypatch.setattr(concurrent, "export_phase", decode_fails)
    with pytest.raises(UnsupportedModel, match="made up for this test"), quiet_export_logs():
        concurrent.traced_graph(resolve_model("llama-tiny"))


def test_a_process_running_other_threads_does_not_fork(monkeypatch):
    import threading

    def no_fork(*_a, **_k):
        raise AssertionError("forked while another thread ran")

    monkeypatch.setattr(concurrent.multiprocessing, "get_context", no_fork)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with quiet_export_logs():
            graph = concurrent.traced_graph(resolve_model("llama-tiny"))
    finally:
        release.set()
        other.join()
    assert graph.phase_blocks("decode") and graph.phase_blocks("prefill")


def test_a_silent_child_is_killed_and_decode_exported_here(monkeypatch, one_process):
    import time

    reference = one_process("llama-tiny")
    monkeypatch.setattr(concurrent, "CHILD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(concurrent, "_export_decode_in_child", lambda *_a: time.sleep(600))
    spec = resolve_model("llama-tiny")
    with quiet_export_logs():
        graph = concurrent.traced_graph(spec)
    assert graph.dumps() == reference
