"""``gimletc deploy --local DIR`` of a services plan (``compile --services``): every service's deployment as
`compiler.deploy.local` starts one plan, and one vllm-router in front that routes each request by its ``model``.

[Note: one gateway for many services] vllm-router's inference-gateway mode (``--enable-igw``) serves several
models behind one router: it ignores ``--worker-urls`` (measured with 0.1.17: "workers: []") and takes workers
through its API, ``POST /workers {"url": ...}``, learning each worker's model from its ``/v1/models``. Each
service's front router (its stable URL) is registered so, and answers ``/v1/models`` with the service's name,
the name its engines serve (`compiler.services` emits each service's launches with it). A request naming no
registered model is passed to some worker by the gateway (measured), and the vLLM engine behind it answers the
OpenAI 404 error ("The model ... does not exist"). ``DIR/deploy/endpoints.json`` gives the gateway's URL and
each service's.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from compiler.deploy.engine_env import engine_python, outside_env, router_binary
from compiler.deploy.launch import FRONT, HOST, Proc, free_port
from compiler.deploy.local import Deployment, healthy, load_local, prepare, run_until_stopped
from backends.engines.vllm import gateway_argv
from compiler.ir.errors import BadInput, RuntimeFailure
from compiler.ir.files import atomic_write_text

log = logging.getLogger(__name__)

GATEWAY = "gateway"
SERVICES_FILE = "services.json"


def is_services_dir(root: str | Path) -> bool:
    return (Path(root) / SERVICES_FILE).is_file()


def service_names(root: Path) -> list[str]:
    try:
        doc = json.loads((root / SERVICES_FILE).read_text(encoding="utf-8"))
        return [s["name"] for s in doc["services"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"{root / SERVICES_FILE}: not a services plan ({type(e).__name__}: {e}); recompile it with "
                       "gimletc compile --services") from None


def gateway_command(binary: Path, port: int, prometheus_port: int) -> list[str]:
    """vllm-router in inference-gateway mode ([Note: one gateway for many services]; the flags are
    `gateway_argv`'s, which the engines target's gateway runs too)."""
    return gateway_argv(str(binary), HOST, port) + ["--prometheus-host", HOST, "--prometheus-port",
                                                    str(prometheus_port)]


def register(gateway_url: str, worker_url: str, timeout_s: float = 30.0) -> str:
    """Add `worker_url` to the gateway; returns the model it serves, as the gateway learnt it."""
    body = json.dumps({"url": worker_url}).encode()
    request = urllib.request.Request(f"{gateway_url}/workers", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as r:  # noqa: S310 (our own router on localhost)
        answer = json.loads(r.read())
    if not answer.get("success"):
        raise RuntimeFailure(f"the gateway at {gateway_url} refused worker {worker_url}: {answer}")
    return str(answer.get("worker", {}).get("model_id", ""))


class ServicesDeployment:
    """Each service's `Deployment` and the gateway in front of them."""

    def __init__(self, root: Path, services: dict[str, Deployment], gateway: Proc):
        self.root, self.services, self.gateway = root, services, gateway

    def start(self, ready_timeout_s: float, progress: Callable[[str], None]) -> None:
        for name, d in self.services.items():  # every engine at once: the start-up overlaps
            progress(f"service {name}:")
            d.spawn_engines(progress)
        for name, d in self.services.items():
            d.finish_start(ready_timeout_s, lambda m, name=name: progress(f"service {name}: {m}"))
        first = next(iter(self.services.values()))
        first.spawn(self.gateway)
        deadline = time.monotonic() + 60.0
        while not healthy(self.gateway.url):
            if self.gateway.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeFailure(f"the gateway (vllm-router --enable-igw) did not start; log {self.gateway.log_path}")
            time.sleep(0.5)
        for name, d in self.services.items():
            front = d.proc(FRONT)
            model = register(self.gateway.url, front.url)
            if model != name:
                raise RuntimeFailure(f"service {name}: the gateway learnt model {model!r} from {front.url}, not "
                                     f"{name!r}; its engines serve another name (recompile with compile --services)")
        self._write_endpoints()
        progress(f"ready: gateway at {self.gateway.url}, routing by model: {', '.join(self.services)}")

    def _write_endpoints(self) -> None:
        data = {"router": self.gateway.url, "deployer_pid": os.getpid(), "gateway_log": str(self.gateway.log_path),
                "services": {name: {"router": d.proc(FRONT).url, "plan": str(d.root),
                                    "endpoints": str(d.root / "deploy" / "endpoints.json")}
                             for name, d in self.services.items()}}
        work = self.root / "deploy"
        work.mkdir(parents=True, exist_ok=True)
        atomic_write_text(work / "endpoints.json", json.dumps(data, indent=1) + "\n")

    def watch(self, until: float | None, _progress: Callable[[str], None] | None = None) -> None:
        while until is None or time.monotonic() < until:
            for d in self.services.values():
                d.check_alive()
            if self.gateway.popen is not None and self.gateway.popen.poll() is not None:
                raise RuntimeFailure(f"the gateway exited with code {self.gateway.popen.returncode}; log "
                                     f"{self.gateway.log_path}")
            time.sleep(0.5)

    def stop(self) -> None:
        first = next(iter(self.services.values()))
        first.stop_procs([self.gateway])
        for d in self.services.values():
            d.stop()
        (self.root / "deploy" / "endpoints.json").unlink(missing_ok=True)


def prepare_services(root: str | Path, python: Path, router: Path) -> ServicesDeployment:
    """The processes of every service of the services plan in `root` and the gateway (nothing started yet)."""
    root = Path(root)
    loaded = {name: load_local(root / name) for name in service_names(root)}
    engines = sum(p.replicas for _plan, pools in loaded.values() for p in pools)
    services, first = {}, 0
    for name, plan_pools in loaded.items():
        services[name] = prepare(root / name, python, router, plan_pools, cores=(first, engines))
        first += sum(p.replicas for p in plan_pools[1])
    port = free_port()
    gateway = Proc(GATEWAY, 0, port, gateway_command(router, port, free_port()), root / "deploy" / "logs" /
                   "gateway.log", env=outside_env())
    return ServicesDeployment(root, services, gateway)


def deploy_services_local(root: str | Path, *, for_s: float | None = None, ready_timeout_s: float = 900.0,
                          progress: Callable[[str], None] = log.info) -> None:
    """Run every service of the services plan in `root` on local vLLM engines behind one gateway until
    interrupted, `for_s` elapses, or a process dies."""
    root = Path(root)
    for name in service_names(root):  # a service that cannot run here is refused before minutes of set-up
        load_local(root / name)
    deployment = prepare_services(root, engine_python(progress), router_binary())
    run_until_stopped(deployment, ready_timeout_s, for_s, progress)
