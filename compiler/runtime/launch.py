"""Start a plan's workers as local processes, watch them, and take them all down on any failure.

`LocalWorkers` spawns one ``python -m compiler.runtime.worker --plan DIR`` per
worker of the plan, with the contract's environment (compiler/emit/topology.py),
each logging to its own file. A watchdog thread polls the processes; the first
one that exits while the run is live is recorded (`dead`) and every other
worker is killed at once, so the driver's pending receive fails fast and no
process outlives the run. Workers also get SIGKILL if the driver itself dies
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from compiler.emit.topology import Worker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalWorkers:
    def __init__(self, plan_root: Path, workers: tuple[Worker, ...], *, log_dir: Path | None = None) -> None:
        self.root = plan_root
        self.workers = workers
        self.port = free_port()
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="gimletc-run-"))
        self.procs: dict[int, subprocess.Popen] = {}
        self.dead: tuple[Worker, int] | None = None
        self.died_at = 0.0  # time.monotonic() when `dead` was recorded
        self.stopping = False
        self._watch = threading.Thread(target=self._watchdog, name="gimletc-watchdog", daemon=True)

    def env(self, w: Worker) -> dict[str, str]:
        repo = str(Path(__file__).resolve().parents[2])
        return {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port),
                "WORLD_SIZE": str(len(self.workers) + 1), "GIMLETC_POOL": w.pool, "GIMLETC_REPLICA": str(w.replica),
                "GIMLETC_WORKER_INDEX": str(w.worker_index), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
                "GIMLETC_PARENT_DEATH": "1", "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "PYTHONWARNINGS": "ignore"}

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for w in self.workers:
            log = open(self.log_file(w), "wb")
            self.procs[w.rank] = subprocess.Popen(
                [sys.executable, "-m", "compiler.runtime.worker", "--plan", str(self.root)], env=self.env(w),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.close()
        self._watch.start()

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until every worker has imported torch and loaded its plan (its log says so), so the rendezvous
        that follows takes milliseconds and the stage timeout only ever measures stages. A worker that dies
        meanwhile ends the wait at once (the watchdog records it); one still not ready at `timeout_s` raises."""
        from compiler.ir.errors import RuntimeFailure
        from compiler.runtime.worker import READY_LINE

        deadline = time.monotonic() + timeout_s
        pending = list(self.workers)
        while pending:
            pending = [w for w in pending if READY_LINE not in self._log_text(w)]
            if not pending or self.dead is not None:
                return
            if time.monotonic() > deadline:
                w = pending[0]
                raise RuntimeFailure(f"stage {w.name} (rank {w.rank}) was not ready within {timeout_s:.0f} s of "
                                     f"starting; logs: {self.log_dir}")
            time.sleep(0.05)

    def _log_text(self, w: Worker) -> str:
        try:
            return self.log_file(w).read_text(errors="replace")
        except OSError:
            return ""

    def log_file(self, w: Worker) -> Path:
        return self.log_dir / f"rank{w.rank}.log"

    def log_tail(self, w: Worker, lines: int = 6) -> str:
        try:
            text = self.log_file(w).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def _watchdog(self) -> None:
        while not self.stopping:
            for w in self.workers:
                code = self.procs[w.rank].poll()
                if code is not None and not self.stopping:
                    self.died_at = time.monotonic()
                    self.dead = (w, code)
                    self.kill_all()
                    return
            time.sleep(0.1)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, grace_s: float = 5.0) -> None:
        """After a clean ``stop`` command: wait for the workers to leave, then kill any that stay."""
        self.stopping = True
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill_all()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]
