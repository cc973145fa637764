"""Keep what native solver code prints off this process's standard output and standard error.

HiGHS 1.12 writes a debugging line (``HighsMipSolverData::transformNewIntegerFeasibleSolution
tmpSolver.run();``) straight to the C library's stdout on some solves, whatever MathOpt's ``enable_output``
says; it landed above ``tools/bench_value.py``'s table, would corrupt ``gimletc ... --json`` for a reader such
as ``jq``, and, sent to standard error instead, still sat among a compile's own lines. While a solve
runs, `solver_output_logged` points file descriptor 1 at a scratch file (Python's ``print`` to ``sys.stdout``
is flushed first); once the solves are done, the C library's buffers are flushed into it and each line it
caught is logged at INFO by this module's logger, which ``gimletc -v`` shows and a default run does not. Solves
run two at a time (`compiler.place.concurrently`), so the first to enter redirects and the last to leave
restores and logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading

log = logging.getLogger(__name__)

_lock = threading.Lock()
_depth = 0
_saved: int | None = None  # descriptor 1 as it was before the first solve entered
_caught = None  # the scratch file descriptor 1 points at while solves run


@contextlib.contextmanager
def solver_output_logged():
    """While the block runs, what is written to descriptor 1 is kept; after the last block, it is logged."""
    global _depth, _saved, _caught
    with _lock:
        if _depth == 0:
            with contextlib.suppress(AttributeError, ValueError, OSError):
                sys.stdout.flush()
            try:
                _caught = tempfile.TemporaryFile()
                _saved = os.dup(1)
                os.dup2(_caught.fileno(), 1)
            except OSError:  # no descriptor 1 (an embedding host), or no scratch space: leave the output be
                _saved = None
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                _flush_c_stdio()  # a line still in the C library's buffer belongs to the scratch file too
                os.dup2(_saved, 1)
                os.close(_saved)
                _saved = None
                _log_caught()


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: what native code printed through the C library's stdout reaches descriptor 1 now. Where
    descriptor 1 is not a terminal (a pipe, a file) ``printf`` keeps its lines in a buffer, which some later write
    would otherwise empty onto the restored descriptor (``PYTHONUNBUFFERED`` hides this: it unbuffers C stdio)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def _log_caught() -> None:
    global _caught
    caught, _caught = _caught, None
    if caught is None:
        return
    with caught:
        caught.seek(0)
        text = caught.read().decode("utf-8", "replace")
    for line in text.splitlines():
        if line.strip():
            log.info("solver: %s", line.rstrip())
