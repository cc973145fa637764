"""``DIR/status.json``: what a command that writes a folder ran, how it ended and where its time went.

Written when the command ends, success or failure (bad input, infeasible,
internal error, Ctrl-C), so a script or a person can tell a finished folder
from a failed one without the terminal output. Before the work starts, the
command's previous outputs are removed (`clear`), so a stale ``plan.json``
never sits beside a failed run's status.

Keys: ``command``, ``argv``, ``gimletc_version``, ``ok``, ``exit_code``,
``error`` (the one-line message, or null), ``warnings``, ``timings_s`` (step
-> seconds), ``marks_s`` (moments since the start, e.g. compile's ``plan.json
written``) and ``wrote`` (files, relative to DIR).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from compiler.cli.console import gimletc_version
from compiler.driver import Timings
from compiler.ir.errors import GimletError
from compiler.ir.files import atomic_write_text

STATUS_FILE = "status.json"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def clear(out: Path, names: tuple[str, ...]) -> None:
    """Remove a previous run's outputs (files or folders) from `out`."""
    for name in names:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


@contextmanager
def recorded(out: Path, command: str, timings: Timings, wrote: list[str],
             outputs: tuple[str, ...] = (), keep: set[str] | None = None) -> Iterator[None]:
    """Run the body, then write ``out/status.json`` however it ended; exceptions propagate unchanged.

    On failure, `outputs` the body may have half written are removed again, except those in `keep` (filled
    by the body as it goes: work that is complete on its own, such as compile's first plan.json).
    """
    keep = keep if keep is not None else set()
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    status = {"ok": False, "exit_code": 1, "error": None}
    try:
        yield
        status = {"ok": True, "exit_code": 0, "error": None}
    except GimletError as e:
        status["exit_code"], status["error"] = e.exit_code, str(e)
        raise
    except KeyboardInterrupt:
        status["exit_code"], status["error"] = 130, "interrupted"
        raise
    except Exception as e:
        status["error"] = f"internal error: {type(e).__name__}: {e}"
        raise
    finally:
        logging.getLogger().removeHandler(collect)
        if not status["ok"]:
            clear(out, tuple(o for o in outputs if o not in keep))
            wrote[:] = sorted(keep)
            if keep and status["error"]:
                status["error"] += f" ({', '.join(sorted(keep))} kept: written before the failure)"
        record = {"command": command, "argv": sys.argv[1:], "gimletc_version": gimletc_version(), **status,
                  "warnings": collect.messages, "timings_s": timings.as_dict(),
                  "marks_s": {k: round(v, 3) for k, v in timings.marks.items()}, "wrote": sorted(wrote)}
        try:
            atomic_write_text(out / STATUS_FILE, json.dumps(record, indent=1, sort_keys=True) + "\n")
        except OSError:
            pass  # the folder was checked writable at the start; losing the status must not hide the real error
