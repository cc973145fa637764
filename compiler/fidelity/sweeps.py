"""How wrong are predictions under load? The closed-loop serving model against measured serving sweeps.

Runs `cost_models.load.closed_loop` (what ``gimletc estimate --concurrency C``
predicts) on every row of ../shared/reference/serving_sweeps.csv: C
closed-loop clients on one replica of ``tp`` devices, fixed input and output
lengths, the row's engine (TensorRT-LLM, vLLM, SGLang) as its release runs by
default (`cost_models.engines.at_version`: overlap scheduling or not), its KV cache at the engine's default,
BF16 ([Note: sweep KV dtype]). Prints median APE of TTFT and TPOT by model, device and engine group.

    .venv/bin/python tools/fidelity_sweeps.py [--fit] [--loo] [--loo-by model,device,engine] [--json] [--worst N]
                                              [--jobs N] [--markdown docs/fidelity.md] [--answered]

``--fit`` fits, with the shared fitter (`compiler.calibrate.fit.fit_fields`) and within physical bounds (`params`):
the step costs every engine's steps pay (host time per step and per running sequence, step_overhead_s and
seq_overhead_s, and the launch gaps per block and per call, block_overhead_s and op_overhead_s: shared, all rows);
each engine's front end and closed-loop admission (request_overhead_s, admission_fraction) on its rows that ran it
as gimletc launches it (`as_launched`; a constant none of them can move stays at its lower bound, "none"); the
wave share of the engines that mix prefill into decode steps (sync_fraction, the rows of TensorRT-LLM, vLLM and SGLang launched with
mixed chunks together, [Note: sweep launch flags]; SGLang by default keeps waves whole, [Note: waves] in
cost_models/engines.py); and ONE set of kernel efficiencies per device (compute_eff, mem_eff,
fp8_compute_eff, each GPU's the best of `KERNEL_EFFS` on its own rows; [Note: one efficiency per device] in
cost_models/derates.py). It prints them to paste into cost_models/engines.py and cost_models/derates.py, and which
groups pin each down (one group: an assumption, which the plan's sensitivity moves). ``--loo`` reports
leave-one-group-out error: each model x device x engine group is predicted with everything fitted on the other
groups only; ``--loo-by model,device,engine`` leaves every group of one model (one device, one engine) out at
once, the test of a model, GPU or engine the fit never saw, and names the worst of them. A device left out runs at
its family's fitted devices' efficiencies; the fitter refuses a fold whose fitting rows include a row it predicts.
``--jobs N`` fits N folds at once; ``--markdown PATH`` writes the tables of docs/fidelity.md. Only this file's
rows are used: the other rows of its source are held out to measure the model (see
../shared/reference/serving_sweeps.md). On two idle cores ``--fit`` takes about 3 minutes (most of it costing
every row's steps at each set of `KERNEL_EFFS`) and each held-out fold about a minute more.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DEFAULT_CSV = next((p / "reference" / "serving_sweeps.csv" for p in (REPO.parent / "shared", REPO.parent.parent / "shared")
                    if p.is_dir()), REPO.parent / "shared" / "reference" / "serving_sweeps.csv")
ENGINE_OF = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}


def step_params():
    """What the step time depends on, shared by every engine (CUDA graphs, kernel launches, sampling on the GPU):
    fitted once on all rows, with physical bounds (lower bounds stand for "none")."""
    from compiler.calibrate.fit import Param

    return (Param("step_overhead_s", 1e-5, 20e-3, grid_lo=1e-4),  # host time per step: 0.1-20 ms
            Param("block_overhead_s", 1e-7, 100e-6, grid_lo=1e-6),  # per block per step: up to 0.1 ms
            Param("op_overhead_s", 1e-9, 5e-6, grid_lo=1e-8),  # per call per step: up to a kernel launch, 5 us
            Param("seq_overhead_s", 1e-8, 200e-6, grid_lo=1e-7))  # per running sequence per step: up to 0.2 ms


def engine_params():
    """What differs between engines' schedulers and front ends: fitted per engine, with the bounds the engine fit on
    a host uses (`compiler.calibrate.engine_fit.ENGINE_OWN_PARAMS`, where "none" is said)."""
    from compiler.calibrate.engine_fit import ENGINE_OWN_PARAMS

    return ENGINE_OWN_PARAMS


def wave_params():
    """The closed-loop wave share of engines that mix prefill into decode steps: one for all of them, fitted on
    their rows together ([Note: waves] in cost_models/engines.py; an engine that does not mix keeps waves whole)."""
    from compiler.calibrate.fit import Param

    return (Param("sync_fraction", 0.01, 1.0, grid_lo=0.05),)  # a share in (0, 1]


def params():
    return step_params() + engine_params() + wave_params()


def load_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def group(row: dict) -> tuple[str, str, str]:
    return row["model"], row["device"], row["backend"]


def devices(row: dict) -> int:
    """The devices the row ran on: its ``tp``, except where the source multiplied it by the expert parallelism.

    The 30 GPT-OSS-120B / H200 / TensorRT-LLM rows whose id names ``tp2_ep2``,
    ``tp4_ep4`` and ``tp8_ep8`` carry tp 4, 16 and 64 (the source's
    ``tp_size``, with ``moe_tp_size`` x ``moe_ep_size`` = ``tp_size``). They ran
    on 2, 4 and 8 GPUs, experts spread over the same GPUs as attention: at each
    concurrency their TPOT is within 3.3% of the ``tpN_ep1`` rows of the same N
    (for example ``tp2_ep2`` c8 6.84 ms, ``tp2_ep1`` c8 6.83 ms, ``tp4_ep1`` c8
    6.05 ms), where 4 and 16 GPUs would be far faster.
    """
    tp = int(row["tp"])
    named = re.search(r"_tp(\d+)_ep(\d+)_\d+$", row["id"])
    if named and int(named[1]) * int(named[2]) == tp and int(named[2]) > 1:
        return int(named[1])
    return tp


def clients(row: dict) -> int:
    """The row's closed-loop clients: its ``concurrency``, except where that holds a batch size.

    The 5 GPT-OSS-120B / H100 / TensorRT-LLM rows name c160 to c384 in their id (the source's
    ``silicon_concurrency`` says the same) and carry 40 to 160, the source's ``batch_size``. They ran the named
    number: with only the batch size running, the rest would wait a whole request (about 60 s) for a slot, where
    they measure 1.3 to 2.3 s to the first token, and TPOT would be a third of the 47 to 60 ms measured.
    """
    named = re.search(r"_c(\d+)_", row["id"])
    return max(int(row["concurrency"]), int(named[1]) if named else 0)


#: [Note: sweep KV dtype] The KV cache the sweeps' rows ran with: their engines' default, ``auto``, which stores
#: it at the model's activation dtype (BF16) unless the checkpoint carries KV-cache quantisation (vLLM
#: ``--kv-cache-dtype auto``: "use model data type"; SGLang ``kv_cache_dtype`` "defaults to the dtype"; TensorRT-LLM's
#: ``kv_cache_config.dtype`` "auto" reads the checkpoint's ``kv_cache_quant_algo``). No row records a KV dtype, and
#: none of the checkpoints its source names (meta-llama/Llama-3.1-8B-Instruct, Qwen/Qwen3-32B,
#: Qwen/Qwen3-235B-A22B-FP8, openai/gpt-oss-120b) carries KV scales: FP8 or MXFP4 weights leave the cache at BF16.
#: gimletc's own default (`compiler.ir.precision.default_kv_dtype`: the weight dtype, FP8 under FP4) is what it
#: launches, with ``--kv-cache-dtype`` explicit (`compiler.emit.serving.launch`), so it is no guide to how someone
#: else's launch ran. Costed at FP8, the 37 Llama-3.1-8B / H200 / SGLang rows (256-512 clients reading long
#: caches) decoded a median 22% too fast, and the H200's fitted mem_eff sank to the grid's end to make up for it.
ENGINE_KV_DTYPE = "bf16"

#: The kernel efficiencies (compute_eff, mem_eff, fp8_compute_eff) the fit tries for each GPU: the family's derate
#: (0.7 each, fitted on ../shared/reference/measurements.csv) and steps of 0.1 above it, and for FP8 matmuls (a share of
#: the FP8 peak, twice the BF16 one on Hopper) 0.7 and steps of 0.1 below it. Each set costs every row's steps again
#: (`physics`); one set is chosen per device ([Note: one efficiency per device] in cost_models/derates.py).
KERNEL_EFFS = tuple((c, m, f) for c in (0.7, 0.8, 0.9) for m in (0.7, 0.8, 0.9) for f in (0.4, 0.5, 0.6, 0.7))
FP8_GEMMS = ("fp8", "fp8_block")


def physics(rows: list[dict], kernels: tuple[float, float, float] | None = None) -> list:
    """Each row's engine-independent `LoopSteps` (the step times on the device): costed once per row, with the
    device's kernel efficiencies, or `kernels` (compute_eff, mem_eff, fp8_compute_eff) instead."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph, stored_precision
    from compiler.ir.precision import Precision
    from cost_models.derates import derate_for
    from cost_models.load import RequestShape, loop_steps

    graphs: dict = {}
    precisions: dict = {}
    adjust = None if kernels is None else (lambda d: replace(d, compute_eff=kernels[0], mem_eff=kernels[1],
                                                             fp8_compute_eff=kernels[2]))
    out = []
    for r in rows:
        if r["model"] not in graphs:
            graphs[r["model"]] = block_graph(r["model"])
        key = (r["model"], r["dtype"])
        if key not in precisions:
            precisions[key] = replace(stored_precision(r["model"], Precision.of(r["dtype"])), kv=ENGINE_KV_DTYPE)
        tp = devices(r)
        dep = deployment(served(r["device"], ENGINE_OF[r["backend"]]), tp, tp, 1, precisions[key], adjust)
        shape = RequestShape(int(r["input_len"]), int(r["output_len"]))
        family = derate_for(dep.device.family)  # the engine's own overheads are what the fit varies
        out.append((loop_steps(graphs[r["model"]], dep, clients(r), shape), family))
    return out


def chosen(rows: list[dict], grid: dict, kernels: dict) -> list:
    """Each row's steps at its device's kernel efficiencies (`kernels`: device -> a set of `grid`)."""
    return [grid[kernels[r["device"]]][i] for i, r in enumerate(rows)]


#: [Note: sweep launch flags] The one launch flag the sweeps' rows differ on from their engine's defaults. The
#: rows' source, aiconfigurator, launches what it measures with its own generator, which turns SGLang's mixed
#: chunks on for aggregated serving: "agg enable_mixed_chunk = true" (src/aiconfigurator/generator/rule_plugin/
#: sglang.rule, since 2026-01-19: https://github.com/ai-dynamo/aiconfigurator/pull/257 and /pull/258, which fixed
#: the flag's misspelling, ``--enable-mix-chunk``, in the templates before it; ".claude/rules/generator/
#: guard_rails.md": "Without it, poor prefill/decode scheduling"). Its templates for SGLang 0.5.6.post2 and later
#: were added after that (commit c46a56b, 2026-01-23), so those rows ran with ``--enable-mixed-chunk``: prompt
#: chunks share steps with the running decodes, and a closed loop's waves dissolve as under the other mixing
#: engines ([Note: waves] in cost_models/engines.py). The 0.5.1.post1 rows (Qwen3-32B on the H100) predate the
#: flag's use: their TTFT grows with the clients as lock-step waves predict. Neither row records its flags; the
#: release stands in for when the generator launched it. SGLang's own default, what gimletc launches
#: (`compiler.emit.serving.launch`), does not mix: the rows launched otherwise inform the shared step costs, the
#: devices' kernels and the wave share, not SGLang's own front end and admission (`as_launched`), which gimletc's
#: predictions of its own launches carry.
MIXED_CHUNK_SINCE = {"sglang": (0, 5, 6)}


def row_engine(row: dict, engines: dict):
    """The row's engine as its release runs by default (`cost_models.engines.at_version`), with the launch flag it
    ran with ([Note: sweep launch flags])."""
    from cost_models.engines import at_version, release

    name = ENGINE_OF[row["backend"]]
    found = at_version(engines[name], row["backend_version"])
    since = MIXED_CHUNK_SINCE.get(name)
    numbers = release(row["backend_version"])[:3]
    return replace(found, mixes_prefill=True) if since and len(numbers) == 3 and numbers >= since else found


def mixes(row: dict) -> bool:
    """Whether the row's engine mixes prompt chunks into decode steps as it ran ([Note: sweep launch flags])."""
    from backends.engines import all_costs

    return row_engine(row, all_costs()).mixes_prefill


def mixing_engines(rows: list[dict]) -> list[str]:
    """The engines some of `rows` ran mixing prompt chunks into decode steps (`mixes`): those the wave share reads."""
    return sorted({ENGINE_OF[r["backend"]] for r in rows if mixes(r)})


def as_launched(row: dict) -> bool:
    """Whether the row ran its engine as gimletc launches it (mixing as its module's ``costs`` in `backends.engines` has it): only
    such rows fit the engine's own constants ([Note: sweep launch flags])."""
    from backends.engines import all_costs

    return mixes(row) == all_costs()[ENGINE_OF[row["backend"]]].mixes_prefill


def predict(steps, family, engine) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of one row's steps under `engine` on a device of derate `family`."""
    from cost_models.load import assemble

    loop = assemble(steps, engine, family)
    return loop.ttft_s * 1e3, loop.tpot_s * 1e3


def errors(rows: list[dict], phys: list, engines: dict) -> list[dict]:
    out = []
    for r, (steps, family_step) in zip(rows, phys):
        ttft, tpot = predict(steps, family_step, row_engine(r, engines))
        m_ttft, m_tpot = float(r["ttft_ms"]), float(r["tpot_ms"])
        out.append({"id": r["id"], "group": " / ".join(group(r)), "model": r["model"], "device": r["device"],
                    "engine": ENGINE_OF[r["backend"]], "tp": devices(r), "concurrency": clients(r),
                    "input_len": r["input_len"], "output_len": r["output_len"],
                    "ttft_ms": m_ttft, "ttft_pred_ms": ttft, "ttft_ape": abs(ttft - m_ttft) / m_ttft * 100,
                    "ttft_err": (ttft - m_ttft) / m_ttft * 100,
                    "tpot_ms": m_tpot, "tpot_pred_ms": tpot, "tpot_ape": abs(tpot - m_tpot) / m_tpot * 100,
                    "tpot_err": (tpot - m_tpot) / m_tpot * 100})
    return out


def _loss(rows: list[dict], phys: list, engines: dict) -> float:
    """Mean |log| error of TTFT plus twice that of TPOT (TPOT is what physics pins down)."""
    loss = 0.0
    for r, (steps, family) in zip(rows, phys):
        ttft, tpot = predict(steps, family, row_engine(r, engines))
        loss += abs(math.log(ttft / float(r["ttft_ms"]))) + 2 * abs(math.log(tpot / float(r["tpot_ms"])))
    return loss / len(rows)


#: Rounds of the two-level fit: the shared step costs are fitted given each engine's own, then those given the
#: shared ones; a second round lets each level see the other's fit rather than its starting values.
ROUNDS = 2


#: Times `fit` chooses each device's kernel efficiencies again at the engine costs fitted at its last choice.
PICKS = 3


def fit(rows: list[dict], grid: dict, start: dict) -> tuple[dict, dict]:
    """Engines fitted on `rows`, and the kernel efficiencies each device runs at ([Note: one efficiency per device]).

    From the family derate's efficiencies (the set of `grid` nearest them: nothing fitted on these rows), the
    engine costs get a one-round fit; then, up to `PICKS` times, each device's own set of `grid` (`KERNEL_EFFS` ->
    `physics` of `rows`) is chosen on its own rows at those costs (a device without FP8 rows keeps the FP8 share it
    has, which its rows cannot tell apart), and the engine costs are fitted in full at the chosen sets, until the
    choice holds."""
    base = nearest(grid, family_kernels(rows[0]["device"], {}))
    kernels = {d: base for d in sorted({r["device"] for r in rows})}
    engines = fit_costs(rows, chosen(rows, grid, kernels), start, rounds=1, restarts=1)
    for i in range(PICKS):
        again = _per_device(rows, grid, engines, kernels)
        if again == kernels and i > 0:
            break
        kernels, engines = again, fit_costs(rows, chosen(rows, grid, again), start)
    return engines, kernels


def _per_device(rows: list[dict], grid: dict, engines: dict, kernels: dict) -> dict:
    """Each device's set of `grid` that predicts its own rows best under `engines` (the others' sets held)."""
    out = dict(kernels)
    for d in sorted(kernels):
        idx = [i for i, r in enumerate(rows) if r["device"] == d]
        sub = [rows[i] for i in idx]
        fp8 = any(r["gemm_quant"] in FP8_GEMMS for r in sub)
        options = [k for k in grid if fp8 or k[2] == kernels[d][2]]
        out[d] = min(options, key=lambda k: (_loss(sub, [grid[k][i] for i in idx], engines), k))
    return out


def family_kernels(device_id: str, kernels: dict) -> tuple[float, float, float]:
    """A device the fit has no rows of: the kernel efficiencies of its family's fitted devices (their median per
    field; [Note: one efficiency per device]), else the family's derate."""
    from backends.registry import device
    from cost_models.derates import derate_for

    family = device(device_id).family
    mates = [k for d, k in sorted(kernels.items()) if device(d).family == family]
    if not mates:
        base = derate_for(family)
        return base.compute_eff, base.mem_eff, base.fp8_compute_eff or base.compute_eff
    return tuple(statistics.median(k[i] for k in mates) for i in range(3))


def fit_costs(rows: list[dict], phys: list, start: dict, rounds: int = ROUNDS, restarts: int = 2) -> dict:
    """Engine costs fitted on `rows` in three levels, alternated `rounds` times: the step costs shared by all
    engines, each engine's own, and the wave share of the engines that mix prefill into decodes. Each engine's own
    costs start at their lower bounds ("none"), so a held-out group's fit does not start from values fitted on it."""
    from compiler.calibrate.fit import fit_fields

    names = sorted({ENGINE_OF[r["backend"]] for r in rows})
    engines = {n: replace(start[n], **{p.name: p.lo for p in engine_params() + wave_params()}) for n in names}
    mixing = mixing_engines(rows)

    def subset(keep) -> tuple[list[dict], list]:
        idx = [i for i, r in enumerate(rows) if keep(r)]
        return [rows[i] for i in idx], [phys[i] for i in idx]

    for _ in range(rounds):
        shared = fit_fields(lambda c: (_loss(rows, phys, {n: replace(engines[n], **_fields(c, step_params()))
                                                          for n in names}), c),
                            engines[names[0]], step_params(), grid_points=4, restarts=restarts)
        engines = {n: replace(engines[n], **_fields(shared, step_params())) for n in names}
        for n in names:
            sub_rows, sub_phys = subset(lambda r, n=n: ENGINE_OF[r["backend"]] == n and as_launched(r))
            # a constant none of the rows can move (`pins`) stays where the fit starts it, "none": fitted, it
            # would land wherever the search left it (SGLang's admission share on its lock-step rows)
            seen = tuple(p for p in engine_params() if any(pins(r, p.name) for r in sub_rows))
            if not seen:  # no row ran it as gimletc launches it: a held-out fold's prior (`fold`)
                continue
            engines[n] = fit_fields(lambda c, n=n: (_loss(sub_rows, sub_phys, {n: c}), c), engines[n],
                                    seen, grid_points=4, restarts=restarts)
        if mixing:
            sub_rows, sub_phys = subset(mixes)
            waves = fit_fields(lambda c: (_loss(sub_rows, sub_phys, {n: replace(engines[n], **_fields(c, wave_params()))
                                                                     for n in mixing}), c),
                               engines[mixing[0]], wave_params(), grid_points=6, restarts=restarts)
            engines.update({n: replace(engines[n], **_fields(waves, wave_params())) for n in names})  # one share
    return {**start, **engines}


def _fields(engine, fitted) -> dict:
    return {p.name: getattr(engine, p.name) for p in fitted}


#: What a held-out fold leaves out: one model x device x engine group, or every group of one model, device or engine.
HOLD_OUT = {"group": group, "model": lambda r: group(r)[0], "device": lambda r: group(r)[1],
            "engine": lambda r: ENGINE_OF[r["backend"]]}


def held_out(rows: list[dict], grid: dict, key, jobs: int = 1) -> list[dict]:
    """Each row predicted with everything fitted on the rows whose `key` differs; the fitter never sees a held-out
    row (`fit` gets the training rows alone, and `_disjoint` checks it). A device left out runs at its family's
    fitted devices' efficiencies (`family_kernels`); an engine without fitting rows that ran it as gimletc launches
    it (left out entirely, or only launched otherwise) has its own costs at the median of the fitted engines' (its
    shipped values were fitted on the held-out rows), and the shared wave share as fitted. `jobs`: folds
    fitted at once, in forked processes."""
    values = sorted({key(r) for r in rows})
    folds = [([i for i, r in enumerate(rows) if key(r) != v], [i for i, r in enumerate(rows) if key(r) == v])
             for v in values]
    if jobs <= 1:
        return [e for train, test in folds for e in fold(rows, grid, train, test)]
    import multiprocessing

    global _FORKED
    _FORKED = (rows, grid)
    with multiprocessing.get_context("fork").Pool(min(jobs, len(folds))) as pool:
        parts = pool.starmap(_forked_fold, folds)
    return [e for part in parts for e in part]


_FORKED: tuple = ()


def _forked_fold(train: list[int], test: list[int]) -> list[dict]:
    return fold(*_FORKED, train, test)


def fold(rows: list[dict], grid: dict, train: list[int], test: list[int]) -> list[dict]:
    """The `test` rows predicted with everything fitted on the `train` rows alone."""
    from backends.engines import all_costs

    _disjoint(rows, train, test)
    fitted, kernels = fit([rows[i] for i in train], {k: [p[i] for i in train] for k, p in grid.items()},
                          dict(all_costs()))
    for d in sorted({rows[i]["device"] for i in test} - set(kernels)):
        kernels[d] = nearest(grid, family_kernels(d, kernels))
    seen = sorted({ENGINE_OF[rows[i]["backend"]] for i in train if as_launched(rows[i])})
    for name in sorted({ENGINE_OF[rows[i]["backend"]] for i in test}) if seen else ():
        if name not in seen:
            prior = {p.name: statistics.median(getattr(fitted[n], p.name) for n in seen) for p in engine_params()}
            fitted[name] = replace(fitted[name], **prior, **_fields(fitted[seen[0]], wave_params()))
    test_rows = [rows[i] for i in test]
    return errors(test_rows, [grid[kernels[r["device"]]][i] for r, i in zip(test_rows, test)], fitted)


def _disjoint(rows: list[dict], train: list[int], test: list[int]) -> None:
    """Refuse a fold whose training rows include a row it is asked to predict (by index or by id)."""
    if set(train) & set(test) or {rows[i]["id"] for i in train} & {rows[i]["id"] for i in test}:
        raise ValueError("a held-out row is among the fitting rows; the fitter refuses to predict a row it was fitted on")


def nearest(grid: dict, kernels: tuple[float, float, float]) -> tuple[float, float, float]:
    """The set of `grid` closest to `kernels` (costed steps exist only for those)."""
    return min(grid, key=lambda k: (sum(abs(math.log(a / b)) for a, b in zip(k, kernels)), k))


#: What a summary breaks its rows down by: the group, and each of its three parts.
BREAKDOWN = ("group", "model", "device", "engine")


def _medians(errs: list[dict]) -> dict:
    """Median APE of TTFT and TPOT, and the median signed error (+: predicted too slow, -: too fast)."""
    return {"rows": len(errs), **{f"{m}_median_{kind}": statistics.median(e[f"{m}_{kind}"] for e in errs)
                                  for m in ("ttft", "tpot") for kind in ("ape", "err")}}


def summary(errs: list[dict]) -> dict:
    out = _medians(errs)
    for by in BREAKDOWN:
        parts: dict[str, list[dict]] = {}
        for e in errs:
            parts.setdefault(e[by], []).append(e)
        out["groups" if by == "group" else f"by_{by}"] = {g: _medians(v) for g, v in sorted(parts.items())}
    return out


def pins(row: dict, name: str) -> bool:
    """Whether `row` pins its engine's constant `name` down: a row that ran the engine as gimletc launches it
    (`as_launched`), for the admission one where the engine mixes (where waves stay whole, no request waits for a
    completion: [Note: waves])."""
    return as_launched(row) and (mixes(row) if name == "admission_fraction" else True)


def pinned_by(rows: list[dict]) -> dict[str, list[str]]:
    """Which groups (model / device / engine) pin each fitted constant down: a device's efficiencies its rows, its
    FP8 share its FP8 rows, an engine's front end and admission the rows that pin them (`pins`), the wave share the
    rows where their engine mixes, the step costs all rows. A constant only one group pins down is an assumption
    (it enters the plan's sensitivity)."""

    def groups(keep) -> list[str]:
        return sorted({" / ".join(group(r)) for r in rows if keep(r)})

    out = {"step costs (" + ", ".join(p.name for p in step_params()) + ")": groups(lambda r: True),
           "sync_fraction": groups(mixes)}
    for d in sorted({r["device"] for r in rows}):
        out[f"{d} compute_eff, mem_eff"] = groups(lambda r, d=d: r["device"] == d)
        out[f"{d} fp8_compute_eff"] = groups(lambda r, d=d: r["device"] == d and r["gemm_quant"] in FP8_GEMMS)
    for n in sorted({ENGINE_OF[r["backend"]] for r in rows}):
        for p in engine_params():
            out[f"{n} {p.name}"] = groups(lambda r, n=n, k=p.name: ENGINE_OF[r["backend"]] == n and pins(r, k))
    return out
