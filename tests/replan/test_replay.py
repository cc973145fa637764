"""tools/replay.py: the Azure trace format read back, requests binned into class rates by hand arithmetic, the
generated day's shift, and (slow) a replay of the shifting night through the simulated deployment with and
without replanning."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import replay  # noqa: E402

CLASSES = [SimpleNamespace(name="chat", input_len=SimpleNamespace(mean=512)),
           SimpleNamespace(name="docs", input_len=SimpleNamespace(mean=6000))]


def test_an_azure_trace_is_read_and_binned(tmp_path):
    """Azure's own timestamp form (7 fractional digits), rows out of order; 10 s windows: window 0 holds two chat
    requests (0.5 s, 9.9999999 s) and one document (3 s), window 1 one document (prompt 2000 is nearer 6000 than
    512 in log space: ln 2000 - ln 512 = 1.36 > ln 6000 - ln 2000 = 1.10)."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:49.6805900,7000,10\n"
                    "2023-11-16 18:15:46.6805900,300,20\n"
                    "2023-11-16 18:15:56.6805899,100,30\n"
                    "2023-11-16 18:15:58.6805900,2000,40\n")
    requests = replay.read_trace(path)
    assert [r.t_s for r in requests] == pytest.approx([0.0, 3.0, 9.9999999, 12.0], abs=1e-6)
    assert [(r.prompt_tokens, r.output_tokens) for r in requests][0] == (300, 20)
    rates = replay.class_rates(requests, CLASSES, 10.0)
    assert rates == [{"chat": 0.2, "docs": 0.1}, {"chat": 0.0, "docs": 0.1}]
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt\n1,2\n")
    with pytest.raises(SystemExit, match="TIMESTAMP"):
        replay.read_trace(bad)


def test_the_generated_day_shifts_from_chat_to_documents(tmp_path):
    """Chat's rate peaks at 14:00 and documents' at 02:00 (the generator's cosine), within Poisson noise: the
    committed trace is this generator's output with its defaults."""
    path = tmp_path / "day.csv"
    replay.generate_day(path)
    assert path.read_bytes() == (REPO / "examples" / "replan" / "day_trace.csv").read_bytes()
    rates = replay.class_rates(replay.read_trace(path), CLASSES, 15.0)
    assert len(rates) == 24
    assert rates[14]["chat"] == pytest.approx(40.0, rel=0.15) and rates[2]["chat"] == pytest.approx(4.0, rel=0.4)
    assert rates[2]["docs"] == pytest.approx(12.0, rel=0.15) and rates[14]["docs"] == pytest.approx(1.2, rel=0.5)
    errors = replay.forecast_errors(replay.read_trace(path), CLASSES, 15.0)
    assert errors["chat"]["points"] == 22


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_replanning_through_the_night_keeps_the_slo(day, tmp_path):
    """The day plan through the trace's first five hours (documents at night): the static plan overloads its
    document prefill and misses the SLO; replanning after each window recovers it."""
    plan_dir, _compiled = day
    requests = [r for r in replay.read_trace(REPO / "examples" / "replan" / "day_trace.csv") if r.t_s < 5 * 15.0]
    runs = {mode: replay.totals(replay.simulate(plan_dir, requests, 15.0, replanning=mode == "replan",
                                                progress=lambda _m: None), 15.0) for mode in ("static", "replan")}
    print(runs)
    assert runs["static"]["windows_overloaded"] >= 3 and runs["static"]["slo_attainment"] < 0.8
    assert runs["replan"]["replans"] >= 1
    assert runs["replan"]["slo_attainment"] > runs["static"]["slo_attainment"] + 0.1


def _undone(records: list[dict], within: int) -> list[tuple[int, str]]:
    """(window, shape) of every change that reverses the shape's previous change made at most `within` windows
    before: replicas added then removed, or removed then added back."""
    last, out = {}, []
    for r in records:
        for shape, before, after in r.get("changes") or ():
            if shape in last and last[shape][1] != (after > before) and r["window"] - last[shape][0] <= within:
                out.append((r["window"], shape))
            last[shape] = (r["window"], after > before)
    return out


#: How much SLO attainment (a share of the day's requests) the anti-flap rules may cost on the simulated day.
SLO_MARGIN = 0.005


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_anti_flap_rules_stop_moves_undone_at_once_on_the_simulated_day(day):
    """The committed day through the day plan, replanning after every window, with the anti-flap rules off
    (--cooldown 0 --forecast-error-weight 0) and at their defaults. Off, some change is undone within the
    cool-down for a gain the rules would not accept (a move made for one mix, moved back when the next window
    brought another); on, every change moved back within the cool-down clears the threshold plus its margin or
    is forced by a pool the running plan would overload, and some proposal was held for it; the day's SLO
    attainment is not worse by more than SLO_MARGIN.

    Counts of replans or reversals are not compared run for run: once a reversal is held the two days take
    different paths, and which placement a later window's tied solves return (routes that differ by 1e-8 req/s
    change the simulated measurements) decides whether a later, larger move is made and moved back with a gain
    that clears the margin (one formulation of the same model undid nothing with the rules on; an equivalent
    one, without the rows the SLO rows imply, undid a window-14 move at window 15 for +40.7%, as the rule
    allows)."""
    from compiler.replan.settings import COOLDOWN_GAIN, COOLDOWN_WINDOWS, MIN_GAIN

    plan_dir, _compiled = day
    requests = replay.read_trace(REPO / "examples" / "replan" / "day_trace.csv")
    runs = {name: replay.simulate(plan_dir, requests, 15.0, replanning=True, progress=lambda _m: None, **kw)
            for name, kw in (("off", {"cooldown": 0, "forecast_weight": 0.0}), ("on", {}))}
    sums = {name: replay.totals(records, 15.0) for name, records in runs.items()}
    print(sums, {name: _undone(records, COOLDOWN_WINDOWS) for name, records in runs.items()})

    def unearned(records):
        """Reversals within the cool-down that neither clear the margin nor are forced."""
        return [(w, shape) for w, shape in _undone(records, COOLDOWN_WINDOWS)
                if (records[w].get("gain") or 0.0) < MIN_GAIN + COOLDOWN_GAIN
                and "would run a pool" not in (records[w].get("decision") or "")]

    assert unearned(runs["off"]), "the day has no flap for the rules to stop: the test no longer tests them"
    assert not unearned(runs["on"]), [runs["on"][w] for w, _shape in unearned(runs["on"])]
    assert any("moves back a recent change" in (r.get("decision") or "") for r in runs["on"])
    assert sums["on"]["slo_attainment"] >= sums["off"]["slo_attainment"] - SLO_MARGIN
