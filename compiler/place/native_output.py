"""Keep what native solver code prints off this process's standard output.

HiGHS 1.12 writes a debugging line (``HighsMipSolverData::transformNewIntegerFeasibleSolution
tmpSolver.run();``) straight to the C library's stdout on some solves, whatever MathOpt's ``enable_output``
says; it landed above ``tools/bench_value.py``'s table, and would corrupt ``gimletc ... --json`` for a reader
such as ``jq``. `stdout_to_stderr` points file descriptor 1 at standard error while a solve runs: native
output lands beside the logs, Python's ``print`` to ``sys.stdout`` is flushed first. Solves run two at a time
(`compiler.place.ilp.concurrently`), so the first to enter redirects and the last to leave restores.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

_lock = threading.Lock()
_depth = 0
_saved: int | None = None


@contextlib.contextmanager
def stdout_to_stderr():
    global _depth, _saved
    with _lock:
        if _depth == 0:
            with contextlib.suppress(AttributeError, ValueError, OSError):
                sys.stdout.flush()
            try:
                _saved = os.dup(1)
                os.dup2(2, 1)
            except OSError:  # no descriptor 1 or 2 (an embedding host): nothing to keep apart
                _saved = None
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                os.dup2(_saved, 1)
                os.close(_saved)
                _saved = None
