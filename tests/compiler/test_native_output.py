"""Native writes to descriptor 1 during solves go to standard error; Python's own output stays on stdout."""

import subprocess
import sys

import pytest

from tests.conftest import REPO

CODE = """
import os, sys, threading, time
from compiler.place.native_output import stdout_to_stderr
print("before")
def solve(tag, hold):
    with stdout_to_stderr():
        os.write(1, f"native-{tag}\\n".encode())  # what a C library's printf does
        time.sleep(hold)
        os.write(1, f"native-{tag}-late\\n".encode())
a = threading.Thread(target=solve, args=("a", 0.2)); b = threading.Thread(target=solve, args=("b", 0.4))
a.start(); time.sleep(0.05); b.start(); a.join(); b.join()  # b enters after a and leaves after it
print('{"json": true}')
"""


@pytest.mark.timeout(60)
def test_overlapping_solves_keep_native_prints_off_stdout_and_restore_it():
    done = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["before", '{"json": true}']
    assert sorted(done.stderr.split()) == ["native-a", "native-a-late", "native-b", "native-b-late"]
