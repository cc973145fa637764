"""Parse serving-engine command lines with the engine's own argument parser; run inside the engine's venv.

Reads a JSON list of argument vectors on stdin and prints a JSON list of ``{"ok": bool, "error": str}``, one
per vector, in order. All vectors are parsed in one process (importing an engine takes seconds).

- ``--engine vllm`` (default): ``vllm serve MODEL ...`` with vLLM's ``vllm serve`` parser, then
  ``validate_parsed_serve_args`` and ``AsyncEngineArgs.from_cli_args`` (which builds no engine config, so no
  model is loaded).
- ``--engine sglang``: ``python3 -m sglang.launch_server ...`` with ``ServerArgs.add_cli_args``'s parser (what
  ``sglang.srt.server_args.prepare_server_args`` parses with; ``ServerArgs``' own checks read the model and
  the devices, so they are not run).

Exit status 3, with one line on stderr, when the engine cannot be imported. This script imports nothing from
gimletc: it runs under the engine venv's python (tests/emit/test_engine_launch.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def _exact(parser: argparse.ArgumentParser) -> None:
    """Accept only full flag names: argparse would take a unique prefix (``--max-num-seq`` for
    ``--max-num-seqs``), which hides a misspelt or renamed flag until a new flag shares the prefix."""
    parser.allow_abbrev = False


def _vllm_checker():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    _exact(subparsers.choices["serve"])

    def check(argv: list[str]) -> None:
        if argv[:2] != ["vllm", "serve"]:
            raise ValueError(f"not a `vllm serve` command: {argv[:2]}")
        args = parser.parse_args(argv[1:])
        validate_parsed_serve_args(args)
        AsyncEngineArgs.from_cli_args(args)

    return check


def _sglang_checker():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    _exact(parser)
    prefix = ["python3", "-m", "sglang.launch_server"]

    def check(argv: list[str]) -> None:
        if argv[:3] != prefix:
            raise ValueError(f"not a `{' '.join(prefix)}` command: {argv[:3]}")
        parser.parse_args(argv[3:])

    return check


def _one(check, argv: list[str]) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            check(argv)
    except SystemExit as e:  # argparse: usage and "error: ..." on stderr
        lines = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
        first = next((i for i, line in enumerate(lines) if "error:" in line), max(len(lines) - 1, 0))
        return {"ok": False, "error": " ".join(lines[first:])[:800] or f"exit {e.code}"}
    except Exception as e:  # noqa: BLE001 - every rejection is a result, not a crash
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:800]}
    return {"ok": True, "error": ""}


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    engine = cli.parse_args().engine
    argvs = json.load(sys.stdin)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # import-time chatter stays off the JSON answer
            check = _vllm_checker() if engine == "vllm" else _sglang_checker()
    except ImportError as e:
        print(f"check_engine_args: cannot import {engine}: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    print(json.dumps([_one(check, list(argv)) for argv in argvs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
