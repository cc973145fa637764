"""What the apply tests share: a replan's plan directory written by hand, and a client that keeps requests going."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO


#: Two one-class workloads on examples/cpu_pd: chat (short prompts, long outputs, TPOT 200 ms: colocated engines)
#: and documents (long prompts, short outputs, TPOT 4 ms: the prefill/decode split).
CHAT = {"name": "chat", "arrival_rate_per_s": "maximise", "slo": {"ttft_ms": 5000, "tpot_ms": 200},
        "classes": [{"name": "chat", "share": 1, "input_len": {"mean": 64, "max": 128},
                     "output_len": {"mean": 128, "max": 256}}]}
DOCS = {**CHAT, "name": "docs", "slo": {"ttft_ms": 5000, "tpot_ms": 4},
        "classes": [{"name": "docs", "share": 1, "input_len": {"mean": 768, "max": 1024},
                     "output_len": {"mean": 16, "max": 32}}]}


def scaled(running: Path, out: Path, role: str = "decode", by: int = 1) -> Path:
    """`running`'s plan with `by` more replicas of its `role` pools (what a replan that scales them writes), its
    router command written for them as the compiler writes it."""
    import shutil

    from compiler.plan.manifest import write_manifest
    from compiler.plan.checks import load_plan
    from compiler.emit.serving.router import router_for
    from compiler.ir.files import atomic_write_text

    shutil.copytree(running, out, ignore=shutil.ignore_patterns("deploy"))
    plan = load_plan(running)
    pools = [p.model_copy(update={"replicas": p.replicas + by}) if p.role == role else p for p in plan.pools]
    plan = plan.model_copy(update={"pools": pools})
    atomic_write_text(out / "plan.json", plan.model_copy(update={"router": router_for(plan)}).dumps())
    write_manifest(out, runnable=True, reason=None)
    return out


@dataclass
class Load:
    """`clients` threads, each sending a completion to `url` `think_s` after its previous one ended, until the
    `with` block ends: every answer is recorded as (monotonic end time, None) or (end time, what went wrong)."""

    url: str
    model: str
    prompts: list[list[int]]
    clients: int = 2
    max_tokens: int = 4
    timeout_s: float = 300.0
    think_s: float = 0.0
    results: list[tuple[float, str | None]] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout_s + 10)

    def _run(self, client: int) -> None:
        n = client
        while not self._stop.is_set():
            body = {"model": self.model, "prompt": self.prompts[n % len(self.prompts)], "temperature": 0,
                    "max_tokens": self.max_tokens, "return_token_ids": True}
            n += self.clients
            req = urllib.request.Request(f"{self.url}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    answer = json.load(r)
                error = None if answer.get("choices") else f"no choices: {str(answer)[:200]}"
            except Exception as e:  # noqa: BLE001 (every failure counts, whatever its kind)
                detail = e.read()[:300].decode(errors="replace") if hasattr(e, "read") else ""
                error = f"{type(e).__name__}: {e} {detail}".strip()
            self.results.append((time.monotonic(), error))
            self._stop.wait(self.think_s)

    def served_between(self, start: float, end: float) -> int:
        return sum(1 for t, error in self.results if start <= t <= end and error is None)

    @property
    def failures(self) -> list[str]:
        return [error for _, error in self.results if error is not None]


def compiled_plan(tmp: Path, name: str, workload: dict) -> Path:
    """llama-mini compiled on examples/cpu_pd for `workload` into ``tmp/name`` (no baselines, no analysis), with the
    inputs it was compiled from recorded as compile records them."""
    import yaml

    from compiler.compile_inputs import CompileInputs
    from compiler.driver import compile
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.ir.files import atomic_write_text

    cluster = REPO / "examples" / "cpu_pd" / "cluster.yaml"
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(workload))
    c = compile("llama-mini", str(cluster), str(path), baselines=False, analyse=False)
    out = tmp / name
    write_plan_dir(c.plan, "llama-mini", out, Options(onnx=False))
    atomic_write_text(out / "report" / "inputs.json", CompileInputs.of("llama-mini", cluster, path).to_json())
    return out
