"""Trace and partition a model, exporting its two phases at once.

[Note: concurrent phases] A cold trace of a full-size model spends about 2 s
exporting prefill and 1.5 s exporting decode (torch.export on the meta device,
single-threaded Python). The two exports share nothing but the built model, so
where the platform can fork (Linux) and the process runs one thread (a fork
copies no other thread, nor the locks it may hold), a child process forked
after the model is built exports and partitions decode while the parent does
prefill; the child's `PhaseParts` come back as JSON over a pipe (no pickle of
fx objects, no code run on loading). `compiler.trace.partition.assemble` joins
the phases exactly as the one-process path does, so the BlockGraph is
byte-identical either way (tests/compiler/test_concurrent_trace.py). A child
that fails to start, dies or stays silent for `CHILD_TIMEOUT_S` costs only the
time: decode is then exported in the parent; a child's `UnsupportedModel` or
`BadInput` is raised as the parent's own.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import sys
import threading

from compiler.inputs.model_spec import ModelSpec
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput, UnsupportedModel
from compiler.trace.export import begin, export_phase, trace
from compiler.trace.partition import PhaseParts, assemble, partition, phase_parts

log = logging.getLogger(__name__)

_ERRORS = {"UnsupportedModel": UnsupportedModel, "BadInput": BadInput}
#: Seconds the parent waits for the child's decode once its own prefill is done (a cold 405B decode takes 2 s);
#: a child still silent then is killed and decode exported in the parent.
CHILD_TIMEOUT_S = 120.0


def traced_graph(spec: ModelSpec, phases: tuple[str, ...] = ("prefill", "decode"), *,
                 concurrent: bool = True) -> BlockGraph:
    """`spec` traced (folded, on meta) and partitioned: `trace` then `partition`, with prefill and decode exported
    in two processes when `concurrent` and the platform forks ([Note: concurrent phases])."""
    if not (concurrent and set(phases) == {"prefill", "decode"} and sys.platform == "linux"
            and threading.active_count() == 1):  # a fork copies no other thread, nor locks they might hold
        return partition(trace(spec, phases))
    traced, model, example_inputs = begin(spec)
    if example_inputs is not None:  # a module:callable with its own inputs has one phase
        return partition(trace(spec, phases, model=model))
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_export_decode_in_child, args=(traced, model, send), daemon=True)
    try:
        child.start()
    except OSError as e:
        log.debug("no child process for the decode export (%s); exporting it here", e)
        child = None
    send.close()
    prefill = phase_parts(traced, export_phase(traced, model, "prefill"))
    decode = _received(receive, child) if child is not None else None
    if decode is None:
        decode = phase_parts(traced, export_phase(traced, model, "decode"))
    return assemble(traced, [prefill, decode])


def _export_decode_in_child(traced, model, send) -> None:
    try:
        message = {"parts": phase_parts(traced, export_phase(traced, model, "decode")).to_json()}
    except (UnsupportedModel, BadInput) as e:
        message = {"error": type(e).__name__, "message": str(e)}
    except Exception:  # anything else: the parent exports decode itself and raises it with its traceback
        message = {"retry": True}
    send.send_bytes(json.dumps(message).encode())
    send.close()


def _received(receive, child) -> PhaseParts | None:
    """The child's decode parts; None if it died without them (the caller exports decode itself)."""
    try:
        message = json.loads(receive.recv_bytes()) if receive.poll(CHILD_TIMEOUT_S) else None
    except (EOFError, OSError):
        message = None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    if message is None or "retry" in message:
        log.debug("the decode export's child process failed (exit code %s); exporting decode here", child.exitcode)
        return None
    if "error" in message:
        raise _ERRORS[message["error"]](message["message"])
    return PhaseParts.from_json(message["parts"])
