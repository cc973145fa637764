"""The ``gimletc`` entry point: the parser, built from each command's ``register``, and error handling.

Imports stay light so ``gimletc --help`` answers at once: torch and
transformers load only when a command traces a model.

Exit codes: 0 success, 1 internal error, 2 bad input, 3 infeasible, 4 runtime failure (`EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from compiler.cli import (
    backends, bench, calibrate, compile, deploy, estimate, explain, inspect, pareto, replan, report, run, schema, serve,
    worker,
)
from compiler.cli.console import gimletc_version
from compiler.ir.errors import GimletError

#: The commands, in the order ``--help`` lists them (the pipeline's order).
COMMANDS = (inspect, backends, estimate, calibrate, compile, report, explain, pareto, run, serve, deploy, bench,
            replan, worker, schema)

EXIT_CODES = (
    (0, "success"),
    (1, "internal error (a bug: rerun with -v for the traceback and report it)"),
    (2, "bad input: a file, field or flag is wrong; the message names it and the fix"),
    (3, "infeasible: no placement meets the constraints; the message names the binding ones"),
    (4, "runtime failure: a worker or transfer failed while running a plan"),
)
EPILOG = "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES)


def _add_verbosity(p: argparse.ArgumentParser, default) -> None:
    """``-v``/``-q``; sub-commands get them too (with no default) so they work anywhere on the line."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", default=default,
                       help="log what each step does (and show tracebacks of internal errors)")
    group.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="print only results and errors: no progress, no warnings")


class _Parser(argparse.ArgumentParser):
    """argparse, with a flag's error on one line like every other error (no usage block), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.removeprefix("gimletc").strip()
        self.exit(2, f"gimletc: error: {command + ': ' if command else ''}{message}; see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gimletc", description="Heterogeneous multi-silicon placement compiler for LLM inference.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gimletc {gimletc_version()}")
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    for p in sub.choices.values():
        _add_verbosity(p, argparse.SUPPRESS)
        p.epilog = p.epilog or EPILOG
        p.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"gimletc: {record.levelname.lower()}: {record.getMessage()}"


#: The packages whose INFO lines ``-v`` shows (each step and what it does); other libraries stay at warnings.
OWN_LOGGERS = ("compiler", "backends", "cost_models")


def _configure_logging(args: argparse.Namespace) -> None:
    level = logging.INFO if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter() if not args.verbose else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.WARNING))  # onnxscript, uvicorn and the like log their INFO lines at length
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args)
    try:
        return args.func(args)
    except GimletError as e:
        print(f"gimletc: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gimletc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gimletc ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 (the last line of defence: one line, exit 1)
        if args.verbose:
            raise
        print(f"gimletc: internal error: {type(e).__name__}: {e} (a bug; rerun with -v for the traceback "
              "and report it)", file=sys.stderr)
        return 1


def entry() -> None:
    """The ``gimletc`` console script (and ``python -m compiler.cli``): `main`, then a quick exit.

    [Note: quick exit] A compile leaves half a million Python objects (traced graphs' symbols, solver models,
    imported modules); the interpreter's teardown frees them one by one, about 2 s on two busy cores, after the
    command is done. Once the output is flushed and no child process of ours runs, nothing is left to do, so the
    process ends at once (``os._exit``). `main` itself returns normally: tests and the Python API call it in-process.
    """
    import multiprocessing
    import os

    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError):  # the reader left: nothing more to say
        pass
    logging.shutdown()
    if multiprocessing.active_children():  # let the normal exit wait for them
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    entry()
