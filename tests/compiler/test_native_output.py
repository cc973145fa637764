"""Native writes to descriptor 1 during solves reach neither stdout nor stderr, only the log (INFO, ``-v``);
Python's own output stays on stdout."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

CODE = """
import ctypes, logging, os, sys, threading, time
from compiler.place.native_output import solver_output_logged
if sys.argv[1] == "verbose":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
print("before")
libc = ctypes.CDLL(None)
def solve(tag, hold):
    with solver_output_logged():
        os.write(1, f"native-{tag}\\n".encode())  # an unbuffered write to the descriptor
        time.sleep(hold)
        libc.printf(f"native-{tag}-late\\n".encode())  # C stdio: buffered while descriptor 1 is a pipe
a = threading.Thread(target=solve, args=("a", 0.2)); b = threading.Thread(target=solve, args=("b", 0.4))
a.start(); time.sleep(0.05); b.start(); a.join(); b.join()  # b enters after a and leaves after it
print('{"json": true}')
sys.stdout.flush(); libc.fflush(None)
"""


def _run(mode: str) -> subprocess.CompletedProcess:
    # PYTHONUNBUFFERED would make C stdio unbuffered too; without it (a user's shell), printf's line waits in the
    # C library's buffer, and a solve that restored descriptor 1 without flushing it let the line out later
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", CODE, mode], cwd=REPO, capture_output=True, text=True, timeout=50,
                          env=env)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.timeout(60)
def test_overlapping_solves_keep_native_prints_off_stdout_and_stderr_and_restore_them():
    done = _run("quiet")
    assert done.stdout.splitlines() == ["before", '{"json": true}']
    assert done.stderr == ""


@pytest.mark.timeout(60)
def test_native_prints_are_logged_at_info():
    done = _run("verbose")
    assert done.stdout.splitlines() == ["before", '{"json": true}']
    prefix = "compiler.place.native_output: solver: "
    lines = done.stderr.splitlines()
    assert all(line.startswith(prefix) for line in lines), done.stderr  # log records, not the raw prints
    assert sorted(line.removeprefix(prefix) for line in lines) == ["native-a", "native-a-late", "native-b",
                                                                   "native-b-late"]
