"""A running plan to replan, and a simulation of its engines (`compiler.replan.simulate`) to measure it by.

The plan is the daytime mix of ``examples/replan`` (chat, some documents) placed on ``examples/clusters/
two_tier.yaml`` with llama-3.1-8b, compiled once per session and written as ``gimletc compile`` writes its
plan directory (``plan.json`` and ``report/inputs.json``, without stage programs: the replan reads neither).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "llama-3.1-8b"
CLUSTER = str(REPO / "examples" / "clusters" / "two_tier.yaml")
DAY = str(REPO / "examples" / "replan" / "workload.yaml")
WINDOW_S = 600.0


def night_workload(tmp: Path, chat_share: float = 0.1) -> str:
    """The day's classes with the mix turned to documents."""
    import yaml

    data = yaml.safe_load(Path(DAY).read_text())
    data["name"] = "night-mix"
    for c in data["classes"]:
        c["share"] = chat_share if c["name"] == "chat" else 1 - chat_share
    path = tmp / f"night-{chat_share}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def write_plan_dir(out: Path, compilation, workload: str) -> Path:
    from compiler.compile_inputs import CompileInputs
    from compiler.ir.files import atomic_write_text

    atomic_write_text(out / "plan.json", compilation.plan.dumps())
    atomic_write_text(out / "report" / "inputs.json", CompileInputs.of(MODEL, CLUSTER, workload).to_json())
    return out


@pytest.fixture(scope="session")
def day(tmp_path_factory):
    """(plan directory, compilation) of the daytime mix."""
    from compiler.driver import compile

    c = compile(MODEL, CLUSTER, DAY, baselines=False, analyse=False)
    return write_plan_dir(tmp_path_factory.mktemp("day-plan"), c, DAY), c


@pytest.fixture(scope="session")
def truth_options(day):
    """The pool options costed for the traffic's true lengths (the day's classes), by shape."""
    from compiler.place.moves import base_key

    prep = day[1].prepared
    return {base_key(o.key): o for o in prep.options}, prep


def sim_classes(prep):
    from compiler.replan.simulate import SimClass

    w = prep.workload
    return [SimClass(c.name, c.input_len.mean, c.input_len.max, c.output_len.mean, c.output_len.max,
                     w.class_slo(c).ttft_ms / 1e3, w.class_slo(c).tpot_ms / 1e3, w.class_slo(c).percentile / 100)
            for c in w.classes]


def simulate(plan, options, prep, rates: dict[str, float], *, windows: int = 3, truth=None, seed: int = 0,
             folder: Path | None = None) -> list:
    """Snapshots (parsed) of `windows` windows of the simulated deployment of `plan` under `rates`; with
    `folder`, the scrapes are also written there as text files (what ``--metrics FOLDER`` reads)."""
    from compiler.deploy.metrics import parse
    from compiler.replan.metrics import merged
    from compiler.replan.simulate import Deployment, Truth

    sim = Deployment(plan, options, sim_classes(prep), seed=seed)
    texts = [sim.scrape()]
    for _ in range(windows):
        sim.step(rates, WINDOW_S, truth or Truth())
        texts.append(sim.scrape())
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (folder / f"scrape-{i:03d}.prom").write_text(text)
    return merged([parse(t, f"scrape-{i:03d}") for i, t in enumerate(texts)])
