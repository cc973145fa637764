"""The rendezvous, and the plan's workers: started here as local processes, or started elsewhere (Kubernetes pods).

[Note: rendezvous]
The driver (rank 0) owns a torch.distributed ``TCPStore`` listening on every
interface (`driver_store`). Each worker connects to it at ``MASTER_ADDR:MASTER_PORT``
(the worker contract, compiler/plan/topology.py), retrying until the driver is
up, and once it has imported torch and loaded its plan it sets the key
``gimletc/ready/{rank}``. The driver waits for every worker's key
(`wait_ready`: up to the start timeout, which covers image pulls and imports on
a loaded machine), and only then joins the gloo process group over the same
store with the *stage* timeout, so that timeout measures stages, never start-up.

Two ways to get the workers, one interface:

- `LocalWorkers` (``gimletc run`` / ``serve`` by default) spawns one
  ``python -m compiler.runtime.worker --plan DIR`` per worker with the contract's
  environment, each logging to its own file, on a store port the OS picked. A
  watchdog thread polls the processes; the first one that exits while the run is
  live is recorded (`dead`) and every other worker is killed at once, so the
  driver's pending receive fails fast and no process outlives the run. Workers
  also get SIGKILL if the driver itself dies (``PR_SET_PDEATHSIG``).
- `ExternalWorkers` (``--workers external``, or ``auto`` with ``RANK=0`` and
  ``WORLD_SIZE`` in the environment, as the Kubernetes manifests set them for the
  driver pod): nothing is spawned; the store listens on ``MASTER_PORT`` and the
  driver waits for the worker pods. A worker that dies shows as a stage that
  fails or does not answer; its logs are the pod's (``kubectl logs``).
"""

from __future__ import annotations

import datetime
import os
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

from compiler.plan.topology import Worker
from compiler.ir.errors import BadInput, RuntimeFailure

READY_PREFIX = "gimletc/ready/"
DEFAULT_MASTER_PORT = 29500


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def driver_store(port: int, world_size: int, timeout_s: float):
    """The rendezvous store's server, on every interface at `port` (0: a free port; read it back from ``.port``)."""
    from torch.distributed import TCPStore

    try:
        # The host only names where the driver's own client connects; the server listens on all interfaces.
        return TCPStore("127.0.0.1", port, world_size, is_master=True, wait_for_workers=False,
                        timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError or DistNetworkError
        raise BadInput(f"cannot listen for the workers on port {port} ({str(e).splitlines()[0][:160]}); "
                       f"free the port or set MASTER_PORT to another") from None


def external_port(world_size: int, env: Mapping[str, str] = os.environ) -> int:
    """``MASTER_PORT`` for a driver whose workers start elsewhere; checks ``RANK`` and ``WORLD_SIZE`` (plan's).

    >>> external_port(5, {"RANK": "0", "WORLD_SIZE": "5", "MASTER_PORT": "29501"}), external_port(5, {})
    (29501, 29500)
    >>> external_port(5, {"WORLD_SIZE": "4"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    compiler.ir.errors.BadInput: WORLD_SIZE=4 but the plan has 5 processes (a driver and 4 workers); ...
    """
    if env.get("RANK", "0") != "0":
        raise BadInput(f"RANK={env['RANK']}: the driver (gimletc run/serve) is rank 0; workers run "
                       f"`python -m compiler.runtime.worker --plan DIR`")
    if "WORLD_SIZE" in env and env["WORLD_SIZE"] != str(world_size):
        raise BadInput(f"WORLD_SIZE={env['WORLD_SIZE']} but the plan has {world_size} processes (a driver and "
                       f"{world_size - 1} workers); fix the launcher's environment")
    try:
        return int(env.get("MASTER_PORT", DEFAULT_MASTER_PORT))
    except ValueError:
        raise BadInput(f"MASTER_PORT={env['MASTER_PORT']!r}: give a port number") from None


def pin_gloo_to_loopback(master_addr: str) -> None:
    """gloo picks its network interface from the host name; when the rendezvous is a loopback address (every process
    on this machine) pin it to ``lo``, unless ``GLOO_SOCKET_IFNAME`` says otherwise."""
    if master_addr.startswith("127.") or master_addr == "localhost":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def wants_external(env: Mapping[str, str] = os.environ) -> bool:
    """``--workers auto``: external when the environment names this process rank 0 of a world (``RANK=0``,
    ``WORLD_SIZE``), as the Kubernetes manifests do for the driver pod.

    >>> wants_external({"RANK": "0", "WORLD_SIZE": "5"}), wants_external({"WORLD_SIZE": "5"}), wants_external({})
    (True, False, False)
    """
    return env.get("RANK") == "0" and "WORLD_SIZE" in env


class _Workers:
    """What the driver needs from its workers, however they were started."""

    def __init__(self, workers: tuple[Worker, ...]) -> None:
        self.workers = workers
        self.dead: tuple[Worker, int] | None = None
        self.died_at = 0.0  # time.monotonic() when `dead` was recorded
        self.stopping = False
        self.log_dir: Path | str = ""

    def start(self) -> None:
        pass

    def wait_ready(self, store, timeout_s: float) -> None:
        """Wait until every worker has set its ready key (see [Note: rendezvous]), so the rendezvous that follows
        takes milliseconds. A local worker that dies meanwhile ends the wait at once (the watchdog records it);
        one still not ready at `timeout_s` raises `RuntimeFailure` naming it."""
        deadline = time.monotonic() + timeout_s
        pending = list(self.workers)
        while pending:
            pending = [w for w in pending if not store.check([f"{READY_PREFIX}{w.rank}"])]
            if not pending or self.dead is not None:
                return
            if time.monotonic() > deadline:
                w = pending[0]
                raise RuntimeFailure(f"stage {w.name} (rank {w.rank}) and {len(pending) - 1} other worker(s) were "
                                     f"not ready within {timeout_s:.0f} s; {self.where_logs()}")
            time.sleep(0.05)

    def where_logs(self) -> str:
        return f"logs: {self.log_dir}"

    def log_tail(self, w: Worker, lines: int = 6) -> str:
        return ""

    def kill_all(self) -> None:
        pass

    def stop(self, grace_s: float = 5.0, *, keep_logs: bool = False) -> None:
        self.stopping = True

    def pids(self) -> list[int]:
        return []


class ExternalWorkers(_Workers):
    """Workers started by someone else (Kubernetes): nothing to spawn, watch or kill from here."""

    def __init__(self, workers: tuple[Worker, ...]) -> None:
        super().__init__(workers)
        self.log_dir = "the worker pods' own logs (kubectl logs)"


class LocalWorkers(_Workers):
    def __init__(self, plan_root: Path, workers: tuple[Worker, ...], *, port: int,
                 log_dir: Path | None = None) -> None:
        super().__init__(workers)
        self.root = plan_root
        self.port = port
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="gimletc-run-"))
        self.own_log_dir = log_dir is None  # a folder of our own making goes after a clean stop
        self.procs: dict[int, subprocess.Popen] = {}
        self._watch = threading.Thread(target=self._watchdog, name="gimletc-watchdog", daemon=True)

    def env(self, w: Worker) -> dict[str, str]:
        repo = str(Path(__file__).resolve().parents[2])
        inherited = {k: v for k, v in os.environ.items() if k != "RANK"}  # a driver run under RANK=0 spawns ranks 1..
        return {**inherited, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port),
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

    def stop(self, grace_s: float = 5.0, *, keep_logs: bool = False) -> None:
        """After a ``stop`` command: wait for the workers to leave, then kill any that stay. Their logs go too,
        unless the caller chose the folder, a worker died or `keep_logs` (the error that names them)."""
        self.stopping = True
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill_all()
        if self.own_log_dir and self.dead is None and not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]
