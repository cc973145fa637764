"""How wrong are the predictions? `estimate` against published measurements.

Runs `gimletc estimate` (in-process, one BlockGraph per model) on every row of
../shared/reference/measurements.csv and of the project's own measurement files
(cost_models/data/measurements_<family>.csv, described in cost_models/data/README.md)
and prints per-row predicted vs measured, the absolute percentage error (APE), and
the median APE overall and per device family.

    .venv/bin/python tools/fidelity.py [--csv PATH ...] [--family F ...] [--fit] [--loo] [--held-out] [--jobs N]
                                       [--markdown docs/fidelity-published.md] [--before-after] [--json]
    .venv/bin/python tools/fidelity.py --answered [--csv PATH ...]

``--answered`` counts the rows ``gimletc estimate`` answers and the ones it refuses (with why), over the
measurement files and ../shared/reference/serving_sweeps.csv (or the ``--csv`` files), each row run the way the
CLI runs it (`compiler.driver.estimate`; `answered` is the function, `tools/fidelity_sweeps.py --answered` the same
count on its file).

``--fit`` searches each family's derate (compute_eff, mem_eff,
block_overhead_s, step_overhead_s; `FITTED_FIELDS` where the rows pin down fewer) within physically plausible bounds
(`_params`) with the shared derate fitter (`compiler.calibrate.fit`, see
[Note: derate fit]) to minimise that family's median APE plus 5% of its worst
row (plus a weak pull towards the generic prior, so fields the rows do not
constrain stay there), and prints the fitted values to paste into cost_models/derates.py.
``--loo`` predicts each row with the derate fitted on the other rows of its
family (leave-one-out); a family with no other row falls back to the generic prior.
``--before-after`` reports, per family: the median APE of the committed
DERATES on every row, the leave-one-out median APE on the shared file's rows
alone (before the new data) and on all rows (after), and the in-sample median
APE of the new fit, with the worst held-out rows.

``--loo`` also reports leave-one-out per device id (rows, median APE and signed error, worst rows); ``--held-out``
predicts cost_models/data/heldout/ (published rows no fit sees) with each family's derate fitted on the fitting
rows alone: the fitter refuses a held-out row, and in a leave-one-out fold the row it predicts
(`refuse_held_out`). ``--jobs N`` fits N folds at once; ``--markdown PATH`` writes both as tables
(docs/fidelity-published.md).

A row measured under an engine release other than the one its family's derate is fitted at runs at that release's
published speed (`cost_models.derates.release_speed`, [Note: engine releases]; never read from the row's own
number); a row with a ``drafter`` decodes speculatively (`cost_models.speculative`, `speculative`; fused with the
target where its ``fused`` column says so); a row whose ``engine`` is optimum-habana or SGLang runs as that engine
(`engine_of`).

Rows with ``batch=max`` use the static-batch mode at the largest batch that fits
memory (`--batch max`); rows with ``concurrency`` use the closed-loop mode
(`--concurrency C`). Fitting runs thousands of estimates: ``--family`` limits it.
"""

from __future__ import annotations

import csv
import functools
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The shared reference files: ../shared beside the checkout (a worktree one level deeper finds it one level up).
SHARED = next((p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared")
DEFAULT_CSV = SHARED / "reference" / "measurements.csv"
DATA_DIR = REPO / "cost_models" / "data"
HELDOUT_DIR = DATA_DIR / "heldout"
#: What the fit varies; the other `Derate` fields keep their values.
FITTED = ("compute_eff", "mem_eff", "block_overhead_s", "step_overhead_s")
#: Families whose rows pin down only some of `FITTED`: every Cerebras row is one user decoding (batch 1), bound by the
#: per-layer and per-step costs, so its compute_eff and mem_eff are not identifiable (a fit moves them to a bound at
#: no gain) and stay at the family's assumed values in cost_models/derates.py, where they are `unpinned`.
FITTED_FIELDS = {"cerebras": ("block_overhead_s", "step_overhead_s")}
#: Loss (percentage points of median APE) per e-fold a fitted field moves away from the generic prior: a tie-break.
PRIOR_PULL_PCT = 0.1


def _params():
    """What --fit searches: plausible values only (an overhead's lower bound stands for "none")."""
    from compiler.calibrate.fit import Param

    return (Param("compute_eff", 0.3, 0.8), Param("mem_eff", 0.4, 0.9), Param("block_overhead_s", 1e-7, 80e-6),
            Param("step_overhead_s", 1e-6, 4e-3))


def data_files() -> list[Path]:
    """The project's measurement files, one per device family."""
    return sorted(DATA_DIR.glob("measurements_*.csv"))


def load_rows(paths: list[Path]) -> list[dict]:
    """Rows of every file, each tagged with the file it came from (``file``)."""
    rows = []
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            rows += [dict(row, file=path.name) for row in csv.DictReader(f)]
    return rows


#: The engines of cost_models.engines a measurement row's ``engine`` column names (by its first word); any other stack
#: runs as ``generic`` (the family's own overheads and the usual KV share of free memory). vLLM rows stay generic: the
#: vllm engine's overheads were fitted on Hopper sweeps, and the AMD family's derate is fitted on its vLLM rows.
ROW_ENGINES = {"optimum-habana": "optimum-habana", "sglang": "sglang"}


def engine_of(row: dict) -> str:
    """The `cost_models.engines` engine that ran a measurement row: optimum-habana's rows keep its memory rule
    ([Note: KV memory] in cost_models/serving.py); every other row runs as ``generic``."""
    words = row.get("engine", "").split()
    return ROW_ENGINES.get(words[0].lower() if words else "", "generic")


def engine_release(row: dict) -> tuple[str, str | None]:
    """The serving engine a measurement row names and its version where the row states one: ("vllm", "0.10.2") for
    "vLLM 0.10.2 (rocm/vllm:...)", ("vllm", None) where the version is not stated ([Note: engine releases] in
    cost_models/derates.py)."""
    text = row.get("engine", "")
    found = re.search(r"\bvLLM\s+(\d+(?:\.\d+)+)", text)
    if found:
        return "vllm", found[1]
    return ("vllm" if re.search("vllm", text, re.IGNORECASE) else engine_of(row)), None


def row_derate(row: dict, dep, derates: dict | None = None, exclude: frozenset[str] = frozenset()):
    """The derate `row` runs at: its family's (fitted, from `derates`, where given), at the speed of the engine
    release it was measured under (`cost_models.derates.release_speed`, never from a pair of numbers that includes
    the row itself or a row of `exclude`)."""
    from cost_models.derates import release_speed

    family = dep.device.family
    derate = derates[family] if derates and family in derates else dep.derate
    speed = release_speed(family, *engine_release(row), exclude=exclude | {row["id"]})
    if speed == 1.0:
        return derate
    return replace(derate, compute_eff=derate.compute_eff * speed, mem_eff=derate.mem_eff * speed,
                   fp8_compute_eff=None if derate.fp8_compute_eff is None else derate.fp8_compute_eff * speed,
                   provenance=f"{derate.provenance}; x{speed:.3f} kernel speed of {row['engine']}")


def row_buckets(row: dict):
    """The buckets the launch behind `row` compiled (cost_models/data/neuron_buckets.csv: the Neuron rows whose source
    states them, [Note: buckets] in cost_models/buckets.py); None for any other row (not padded)."""
    return _launch_buckets().get(row["id"])


@functools.cache
def _launch_buckets() -> dict:
    """cost_models/data/neuron_buckets.csv by row id, read once."""
    from cost_models.buckets import Buckets

    with open(DATA_DIR / "neuron_buckets.csv", newline="") as f:
        return {r["id"]: Buckets(*(tuple(int(v) for v in r[k].split()) for k in ("context_buckets", "token_buckets")))
                for r in csv.DictReader(f)}


def predict(row: dict, graphs: dict, derates: dict | None = None, exclude: frozenset[str] = frozenset()) -> float:
    """`row`'s metric as `gimletc estimate` predicts it, with the family's derate from `derates` where given, at its
    engine release's speed (`row_derate`); a row that decodes speculatively (``drafter``) through the speculative
    model (`speculative`)."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.cost.estimate import estimate
    from compiler.driver import block_graph
    from compiler.inputs.scenarios import batch
    from compiler.ir.precision import Precision

    model = row["model"]
    if model not in graphs:
        graphs[model] = block_graph(model)
    dep = deployment(served(row["device"], engine_of(row)), int(row["count"]), int(row["tp"]), int(row["pp"]),
                     Precision.of(row["dtype"]), buckets=row_buckets(row))
    dep = replace(dep, derate=row_derate(row, dep, derates, exclude))
    concurrency = row.get("concurrency") or None
    r = estimate(graphs[model], dep, input_len=int(row["input_len"]), output_len=int(row["output_len"]),
                 batch=None if concurrency else batch(row["batch"]),
                 concurrency=int(concurrency) if concurrency else None, lockstep=lengths_of(row) != "vary")
    if row.get("drafter"):
        return speculative(row, graphs, dep, r)
    return float(getattr(r, row["metric"]))


def speculative(row: dict, graphs: dict, dep, plain) -> float:
    """`row`'s metric when it decodes speculatively: the drafter (``drafter``, a preset) drafts ``draft_tokens``
    per round with per-token acceptance ``acceptance`` (`cost_models.speculative`, Leviathan et al. 2023) on the
    target's own devices at the target's parallelism (no transfer between them); TTFT adds the drafter's prefill of
    the prompt to the plain estimate's (`plain`). A row whose ``fused`` is ``yes`` drafts inside the target's program
    ([Note: fused speculation] in cost_models/speculative.py): its draft steps and prefill pay no host time of their
    own; any other runs each draft step as an engine step."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph
    from compiler.ir.precision import Precision
    from cost_models.speculative import Drafting, drafter_prefill, speculative_round

    drafter = row["drafter"]
    if drafter not in graphs:
        graphs[drafter] = block_graph(drafter)
    drafter_dep = replace(deployment(served(row["device"], engine_of(row)), int(row["count"]), int(row["tp"]),
                                     int(row["pp"]), Precision.of(row["dtype"]), buckets=row_buckets(row)),
                          derate=dep.derate)
    drafting = Drafting(graphs[drafter], drafter_dep, float(row["acceptance"]), int(row["draft_tokens"]),
                        link_bw_bytes_per_s=math.inf, link_latency_s=0.0, fused=fused(row))
    batch = int(row.get("concurrency") or row["batch"])
    input_len, output_len = int(row["input_len"]), int(row["output_len"])
    tpot_s = speculative_round(graphs[row["model"]], dep, drafting, batch, input_len + output_len / 2, input_len,
                               output_len).tpot_s
    ttft_s = plain.ttft_ms / 1e3 + drafter_prefill(drafting, batch, input_len).time_s
    values = {"tpot_ms": tpot_s * 1e3, "ttft_ms": ttft_s * 1e3, "tokens_per_s_per_user": 1.0 / tpot_s,
              "output_tokens_per_s": batch * dep.replicas * output_len / (ttft_s + (output_len - 1) * tpot_s)}
    if row["metric"] not in values:
        raise ValueError(f"{row['id']}: metric {row['metric']} is not predicted for a speculative row; "
                         f"use one of {', '.join(values)}")
    return values[row["metric"]]


def fused(row: dict) -> bool:
    """Whether a speculative row's source says the drafter ran fused with the target (its ``fused`` column: ``yes``;
    empty, or a file without the column, for separate drafting)."""
    value = row.get("fused", "").strip().lower()
    if value not in ("", "yes"):
        raise ValueError(f"{row['id']}: fused is {value!r}; write yes (the source says so) or leave it empty")
    return value == "yes"


SWEEPS_CSV = SHARED / "reference" / "serving_sweeps.csv"


def all_rows(sweeps: Path = SWEEPS_CSV) -> list[dict]:
    """Every measured row of the three sets: ../shared/reference/measurements.csv, the serving sweeps and
    cost_models/data/ (each tagged with its ``file``)."""
    return load_rows([DEFAULT_CSV, sweeps, *data_files()])


def lengths_of(row: dict) -> str:
    """A row's ``lengths`` column (``fixed`` where empty; `cost_models.load.LENGTHS`)."""
    return row.get("lengths") or "fixed"


def estimate_args(row: dict) -> dict:
    """The keyword arguments of `compiler.driver.estimate` for a measurement row or a serving-sweep row (the
    sweep's devices, clients, engine and KV dtype as `tools/fidelity_sweeps.py` reads them)."""
    from compiler.inputs.scenarios import batch
    from compiler.ir.precision import Precision

    shape = dict(model=row["model"], device=row["device"], pp=int(row.get("pp") or 1),
                 precision=Precision.of(row["dtype"]), input_len=int(row["input_len"]),
                 output_len=int(row["output_len"]))
    if "backend" in row:  # a serving sweep: one replica of tp devices, C clients, the row's engine and its KV dtype
        from compiler.fidelity.sweeps import ENGINE_KV_DTYPE, ENGINE_OF, clients, devices

        tp = devices(row)
        return dict(shape, precision=Precision.of(row["dtype"], kv=ENGINE_KV_DTYPE), count=tp, tp=tp, batch=None,
                    concurrency=clients(row), engine=ENGINE_OF[row["backend"]])
    concurrency = row.get("concurrency") or None
    return dict(shape, count=int(row["count"]), tp=int(row["tp"]), batch=None if concurrency else batch(row["batch"]),
                concurrency=int(concurrency) if concurrency else None, engine=engine_of(row),
                lengths=lengths_of(row), buckets=row_buckets(row))


def answered(rows: list[dict], graphs: dict) -> list[str]:
    """Per row, "" where `compiler.driver.estimate` answers it, else its refusal (the error's first clause)."""
    from compiler.driver import estimate
    from compiler.ir.errors import GimletError

    out = []
    for row in rows:
        try:
            estimate(**estimate_args(row), graphs=graphs)
            out.append("")
        except GimletError as e:
            out.append(f"{type(e).__name__}: {str(e).split(';')[0]}")
    return out


def print_answered(rows: list[dict], graphs: dict) -> None:
    """How many rows `estimate` answers, overall and per file and device family, and each refusal."""
    refusals = answered(rows, graphs)
    by: dict[str, list[int]] = {}
    for row, why in zip(rows, refusals):
        for key in (row["file"], "family " + family_of(row["device"]),
                    "non-NVIDIA" if family_of(row["device"]) != "nvidia" else "NVIDIA"):
            by.setdefault(key, [0, 0])[bool(why)] += 1
    print(f"answered {refusals.count('')} of {len(rows)} rows, refused {len(rows) - refusals.count('')}")
    for key, (ok, no) in sorted(by.items()):
        print(f"  {key:36s} answered {ok:4d}  refused {no:4d}")
    for row, why in zip(rows, refusals):
        if why:
            print(f"  refused {row['id'][:60]:60s} {why}")


def evaluate_rows(rows: list[dict], graphs: dict, derates: dict | None = None,
                  exclude: frozenset[str] = frozenset()) -> list[dict]:
    """Each row predicted (`predict`) against its measured value; `exclude`: rows being predicted by a fit that
    must not see them (no release speed is read from their numbers)."""
    out = []
    for row in rows:
        measured = float(row["value"])
        try:
            predicted = predict(row, graphs, derates, exclude)
            ape = abs(predicted - measured) / measured * 100
            error = ""
        except Exception as e:  # report the row, keep going
            predicted, ape, error = float("nan"), float("nan"), f"{type(e).__name__}: {e}"
        out.append({"id": row["id"], "model": row["model"], "device": row["device"],
                    "family": family_of(row["device"]), "count": row["count"], "dtype": row["dtype"],
                    "batch": row.get("concurrency") and f"c{row['concurrency']}" or row["batch"],
                    "in": row["input_len"], "out": row["output_len"], "metric": row["metric"],
                    "measured": measured, "predicted": predicted, "ape_pct": ape,
                    "err_pct": (predicted - measured) / measured * 100, "error": error})
    return out


def medians(results: list[dict], key: str = "ape_pct") -> dict[str, float]:
    ok = [r for r in results if r[key] == r[key]]
    out = {"overall": statistics.median(r[key] for r in ok)} if ok else {}
    for fam in sorted({r["family"] for r in ok}):
        out[fam] = statistics.median(r[key] for r in ok if r["family"] == fam)
    return out


def by_device(results: list[dict], key: str = "ape_pct") -> dict[str, dict]:
    """Per device id: rows, and the median of `key` over the rows that have it."""
    out = {}
    for dev in sorted({r["device"] for r in results}):
        vals = [r[key] for r in results if r["device"] == dev and r[key] == r[key]]
        out[dev] = {"rows": len(vals), "median": statistics.median(vals) if vals else float("nan")}
    return out


def heldout_files() -> list[Path]:
    """The held-out published measurements (cost_models/data/heldout/): scored, never fitted."""
    return sorted(HELDOUT_DIR.glob("measurements_*.csv"))


def held_out_ids() -> frozenset[str]:
    return frozenset(r["id"] for r in load_rows(heldout_files()))


def refuse_held_out(fitting: list[dict], predicting: frozenset[str] = frozenset()) -> None:
    """The fitter refuses a row of the held-out set, and a row it is asked to predict (by id)."""
    bad = {r["id"] for r in fitting} & (held_out_ids() | predicting)
    if bad:
        raise ValueError(f"the fitter refuses rows it is asked to predict or that are held out: {', '.join(sorted(bad))}"
                         " (cost_models/data/heldout/ is scored, never fitted)")


def fit_family(fam: str, fam_rows: list[dict], graphs: dict, predicting: frozenset[str] = frozenset()):
    """The derate of `fam` that best predicts `fam_rows`: median APE plus 5% of the worst row, plus a weak pull
    towards the generic prior (`PRIOR_PULL_PCT` per e-fold) so that a field the rows do not constrain (Cerebras'
    compute_eff when every row is an overhead-bound batch-1 decode) stays at the prior instead of wandering to a
    bound. The start and the prior are the same for every fit, so a held-out row never shapes its own prediction.
    Refuses held-out rows and rows of `predicting` (`refuse_held_out`); nor does any release speed the fit uses
    come from their numbers."""
    from compiler.calibrate.fit import fit_fields
    from cost_models.derates import DERATES, GENERIC

    refuse_held_out(fam_rows, predicting)
    fields = FITTED_FIELDS.get(fam, FITTED)
    prior = replace(DERATES.get(fam, GENERIC), **{k: getattr(GENERIC, k) for k in fields})

    def evaluate(candidate):
        res = evaluate_rows(fam_rows, graphs, {fam: candidate}, predicting)
        errs = [r["ape_pct"] for r in res if r["ape_pct"] == r["ape_pct"]]
        pull = PRIOR_PULL_PCT * sum(abs(math.log(getattr(candidate, k) / getattr(prior, k))) for k in fields)
        return (statistics.median(errs) + 0.05 * max(errs) + pull if errs else float("inf")), candidate

    return fit_fields(evaluate, prior, tuple(p for p in _params() if p.name in fields), grid_points=3, restarts=2)


def fit(rows: list[dict], graphs: dict, predicting: frozenset[str] = frozenset()) -> dict:
    """A fitted derate per family present in `rows`."""
    return {fam: fit_family(fam, [r for r in rows if family_of(r["device"]) == fam], graphs, predicting)
            for fam in sorted({family_of(r["device"]) for r in rows})}


def loo_one(rows: list[dict], i: int, graphs: dict) -> dict:
    """Row `i` predicted with the derate fitted on the other rows of its family (the fit never sees the row, by
    index or by id, nor a release speed read from its number)."""
    from cost_models.derates import GENERIC

    row = rows[i]
    fam = family_of(row["device"])
    held = frozenset({row["id"]})
    others = [r for j, r in enumerate(rows) if j != i and r["id"] != row["id"] and family_of(r["device"]) == fam]
    derate = fit_family(fam, others, graphs, held) if others else GENERIC
    return evaluate_rows([row], graphs, {fam: derate}, held)[0]


def loo(rows: list[dict], graphs: dict) -> list[float]:
    """Each row's leave-one-out APE (`loo_one`)."""
    return [loo_one(rows, i, graphs)["ape_pct"] for i in range(len(rows))]


def held_out(fitting: list[dict], held: list[dict], graphs: dict) -> list[dict]:
    """The held-out rows predicted with each family's derate fitted on `fitting` alone (families without fitting rows
    at the generic prior)."""
    from cost_models.derates import GENERIC

    ids = frozenset(r["id"] for r in held)
    families = sorted({family_of(r["device"]) for r in held})
    derates = {fam: fit_family(fam, rows, graphs, ids) if rows else GENERIC
               for fam in families for rows in [[r for r in fitting if family_of(r["device"]) == fam]]}
    return evaluate_rows(held, graphs, derates, ids)


def before_after(shared: list[dict], new: list[dict], graphs: dict) -> dict:
    """Per family: committed-derate APE on all rows, LOO before (shared rows) and after (all rows), the new fit."""
    rows = shared + new
    committed = evaluate_rows(rows, graphs)
    loo_before = dict(zip((r["id"] for r in shared), loo(shared, graphs)))
    loo_after = loo(rows, graphs)
    fitted = fit(rows, graphs)
    after = evaluate_rows(rows, graphs, fitted)
    for r, c, held in zip(after, committed, loo_after):
        r.update(committed_ape_pct=c["ape_pct"], committed_predicted=c["predicted"], loo_ape_pct=held,
                 loo_before_ape_pct=loo_before.get(r["id"], float("nan")))
    families = {}
    for fam in sorted({r["family"] for r in after}):
        fam_rows = [r for r in after if r["family"] == fam]
        worst = sorted((r for r in fam_rows if r["loo_ape_pct"] == r["loo_ape_pct"]),
                       key=lambda r: -r["loo_ape_pct"])[:3]
        families[fam] = {
            "rows_before": sum(1 for r in shared if family_of(r["device"]) == fam), "rows_after": len(fam_rows),
            "committed_median_ape_pct": _median(fam_rows, "committed_ape_pct"),
            "loo_before_median_ape_pct": _median(fam_rows, "loo_before_ape_pct"),
            "loo_after_median_ape_pct": _median(fam_rows, "loo_ape_pct"),
            "fit_median_ape_pct": _median(fam_rows, "ape_pct"),
            "worst_loo_rows": [(r["id"], round(r["loo_ape_pct"], 1)) for r in worst],
            "derate": {k: getattr(fitted[fam], k) for k in FITTED}}
    return {"rows": after, "families": families}


def _median(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")


def family_of(device_id: str) -> str:
    from backends.registry import device

    return device(device_id).family


def derate_line(fam: str, fields: dict) -> str:
    """One family's fitted derate fields as a line to paste into cost_models/derates.py."""
    return (f"{fam}: compute_eff={fields['compute_eff']:.4g} mem_eff={fields['mem_eff']:.4g} "
            f"block_overhead_s={fields['block_overhead_s']:.3g} step_overhead_s={fields['step_overhead_s']:.3g}")


def loo_rows(rows: list[dict], graphs: dict, jobs: int = 1) -> list[dict]:
    """Every row's `loo_one`, with `jobs` folds fitted at once in forked processes."""
    if jobs <= 1:
        return [loo_one(rows, i, graphs) for i in range(len(rows))]
    import multiprocessing

    global _FORKED
    _FORKED = (rows, graphs)
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(_forked_loo, range(len(rows)))


_FORKED: tuple = ()


def _forked_loo(i: int) -> dict:
    return loo_one(*_FORKED[:1], i, _FORKED[1])
