"""Write a plan's artifacts in a child process while the compile goes on (`stage_artifacts` in the background).

[Note: artifacts in the background] The artifacts (stage programs, weight shards, ``model/``, ONNX) depend only on
the plan's pools and transfers, which the placement fixes; the baselines, the sensitivity analysis and the report
that follow it change neither. So ``gimletc compile`` starts them as soon as the placement is solved: where the
platform forks (Linux) and the process runs no other Python thread (a fork copies no other thread, nor the locks
it may hold, as in [Note: concurrent phases]; the placement solver, HiGHS, keeps one idle native worker, which
holds nothing the child touches: the child runs no solve), a child forked then writes them, on the second core, while the parent solves
the baselines and writes the report. The child sends back `Staged` as JSON over a pipe (no pickle, no code run on
loading) and the log records it made, which the parent logs as its own (status.json keeps its warnings). A child
that cannot start, dies or fails otherwise costs only the time: the parent writes the artifacts itself; a child's
`BadInput` or `UnsupportedModel` is raised as the parent's own. Either way the files are the same bytes
(tests/compiler/test_cli_first_use.py checks the two ways against each other).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import sys
import threading
from pathlib import Path

from compiler.emit.artifacts import Options, Staged, stage_artifacts
from compiler.plan.schema import Plan
from compiler.ir.errors import BadInput, UnsupportedModel

log = logging.getLogger(__name__)

_ERRORS = {"UnsupportedModel": UnsupportedModel, "BadInput": BadInput}


#: Seconds the parent waits for the child's answer before it stops it and writes the artifacts itself: a child that
#: hangs (a fork's inherited state gone wrong) costs time, never the compile.
CHILD_LIMIT_S = 900.0


class Artifacts:
    """`stage_artifacts` of one plan, started in a child process when the platform allows (`start`)."""

    def __init__(self, plan: Plan, model: str, out: str | Path, options: Options) -> None:
        self.plan, self.model, self.out, self.options = plan, model, Path(out), options
        self.child = None
        self.receive = None

    @staticmethod
    def start(plan: Plan, model: str, out: str | Path, options: Options) -> "Artifacts":
        """Begin writing `plan`'s artifacts: in a forked child where one can start, else later, in `result`."""
        job = Artifacts(plan, model, out, options)
        if sys.platform != "linux" or threading.active_count() != 1:
            return job
        ctx = multiprocessing.get_context("fork")
        job.receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_in_child, args=(plan, model, job.out, options, send), daemon=True)
        try:
            child.start()
            job.child = child
        except OSError as e:
            log.debug("no child process for the artifacts (%s); writing them here", e)
            job.receive.close()
            job.receive = None
        send.close()
        return job

    def result(self, plan: Plan) -> Staged:
        """The artifacts of `plan`, whose pools and transfers must be the started plan's (else written here)."""
        same = [p.model_dump() for p in plan.pools] == [p.model_dump() for p in self.plan.pools] and \
            [t.model_dump() for t in plan.transfers] == [t.model_dump() for t in self.plan.transfers]
        staged = self._received() if self.child is not None else None
        if staged is not None and same:
            return staged
        return stage_artifacts(plan, self.model, self.out, self.options)

    def cancel(self) -> None:
        """Stop the child if it still runs (the compile failed: its outputs are about to be removed)."""
        if self.child is not None:
            if self.child.is_alive():
                self.child.kill()
            self.child.join()
            self.child = None
        if self.receive is not None:
            self.receive.close()
            self.receive = None

    def _received(self) -> Staged | None:
        message = None
        try:
            waited = 0.0
            while message is None and (self.receive.poll(1.0) or self.child.is_alive()) and waited < CHILD_LIMIT_S:
                waited += 1.0
                if self.receive.poll(0):
                    message = json.loads(self.receive.recv_bytes())
        except (EOFError, OSError):
            message = None
        finally:
            exit_code = self.child.exitcode
            self.cancel()
        if message is None or "retry" in message:
            log.debug("the artifacts' child process failed (exit code %s); writing them here", exit_code)
            return None
        for level, name, text in message.get("logs", []):
            logging.getLogger(name).log(level, "%s", text)
        if "error" in message:
            raise _ERRORS[message["error"]](message["message"])
        return Staged.from_json(message["staged"])


class _Keep(logging.Handler):
    """The child's log records, to be logged by the parent (which owns stderr and status.json)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))


def _in_child(plan: Plan, model: str, out: Path, options: Options, send) -> None:
    keep = _Keep()
    logging.getLogger().handlers[:] = [keep]
    try:
        message = {"staged": stage_artifacts(plan, model, out, options).to_json()}
    except (UnsupportedModel, BadInput) as e:
        message = {"error": type(e).__name__, "message": str(e)}
    except Exception:  # anything else: the parent writes the artifacts itself and raises it with its traceback
        message = {"retry": True}
    message["logs"] = [r for r in keep.records if r[0] >= logging.getLogger(r[1]).getEffectiveLevel()]
    send.send_bytes(json.dumps(message).encode())
    send.close()
