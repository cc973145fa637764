"""The ``gimletc`` entry point: the parser, built from each command's ``register``, and error handling.

Imports stay light so ``gimletc --help`` answers at once: torch and
transformers load only when a command traces a model.

Exit codes: 0 success, 2 bad input, 3 infeasible, 4 runtime failure, 1 other errors.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from compiler.cli import backends, calibrate, compile, estimate, inspect, pareto, schema
from compiler.ir.errors import GimletError

#: The commands, in the order ``--help`` lists them (the pipeline's order).
COMMANDS = (inspect, backends, estimate, calibrate, compile, pareto, schema)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gimletc",
        description="Heterogeneous multi-silicon placement compiler for LLM inference.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what each step does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
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


if __name__ == "__main__":
    sys.exit(main())
