"""Trim model: how many runs autotune's trim (``autotune/study/trim.py``) takes to undo a winner's changes that do
nothing, and how often it keeps what matters, when runs vary the way re-measurements on this machine vary.

    .venv/bin/python -m benchmarks.trim_model [--studies 2000] [--rounds 3] [--pipeline images] [--run-sd SD]
        [--trim-margin 0.25] [--trim-bound inf] [--keep-z Z] [--no-early-exits] [--finalists N] [--rival F]
        [--seed 0] [FILE ...]

It also prints, per scenario, what the recommendation's stated gain reads against its true gain (geometric mean),
how often its 95 % interval holds the true gain, and how wide it is, by three rules: the rounds of the race that proves
it alone, the rounds the tuner counts (``autotune/results/gain_rounds.py``), and every round of every race that ran it
beside the baseline. With ``--finalists N`` the finalists' race is the
tuner's own, the winner against N - 1 rivals reading ``--rival`` times its throughput (1: as fast), which its verdict
chooses among on the rounds it reads: the winner's curse a stated gain must not inherit.

A model, not a measurement, like ``benchmarks.race_model`` (whose noise it fits to the same files): it drives
autotune's own ``run_trim`` with simulated runs, so that rules of the trim can be compared in seconds; only a real
tune (docs/benchmarks.md, section 7) says what a trim costs on a pipeline.

A scenario is a race's winner (real knob values) and, for each change it makes from the baseline, the factor its
throughput takes when that change alone is undone (``effects``); ``together`` adds factors taken only when all of
a group of changes are undone (redundant changes: either one gives the gain). A configuration's true throughput,
relative to the winner's, is the product of the factors of the changes it undoes. Each run draws the round effect
of its race round and its own run noise. A change *matters* when undoing it alone costs 2 % or more; of redundant
changes (a group that costs that much only undone together) one must stay.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autotune.knobs import BASELINE_DEFAULTS, KNOBS, changed
from autotune.measure.stats import RatioInterval, ratio_interval
from autotune.records import TrialRecord
from autotune.results import trim_rules
from autotune.results.finalist import Finalist
from autotune.results.gain_rounds import GainRounds, paired_rounds
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import TIE_TOLERANCE, count_changes
from autotune.results.summary import race_index
from autotune.results.trim_rules import trim_path
from autotune.study import run_race
from autotune.study.trim import run_trim
from benchmarks.race_model import DEFAULT_FILES, Noise, UnstoredStudy, fit_noise

# A change costing at least this much when undone matters: the trim should keep it.
MATTERS = 0.02

# The README's example (conf/pipeline/mymodel.yaml): its baseline, and the winner of the README's run.
MYMODEL_BASELINE = BASELINE_DEFAULTS | {
    "batch_size": 32,
    "num_workers": 0,
    "prefetch_factor": None,
    "persistent_workers": None,
}
MYMODEL_WINNER = MYMODEL_BASELINE | {
    "batch_size": 64,
    "num_workers": 2,
    "prefetch_factor": 2,
    "persistent_workers": True,
    "num_threads": 1,
    "channels_last": True,
    "optimizer_impl": "foreach",
    "set_to_none": False,
    "malloc": "keep",
}


@dataclass(frozen=True)
class Scenario:
    """A winner changing knobs from ``baseline``; ``effects`` by knob (1.0 where not given), ``together`` by group;
    ``baseline_relative`` the baseline's throughput over the winner's where measured (effects need not multiply)."""

    baseline: dict[str, Any]
    winner: dict[str, Any]
    effects: dict[str, float]
    together: dict[frozenset[str], float] = field(default_factory=dict)
    baseline_relative: float | None = None

    def relative(self, knobs: dict[str, Any]) -> float:
        """The true throughput of ``knobs`` over the winner's. A knob that no longer applies (worker options without
        workers) adds no effect of its own: the effect of undoing the knob it depends on includes it."""
        if knobs == self.baseline and self.baseline_relative is not None:
            return self.baseline_relative
        undone = {name for name in self.changes if knobs[name] != self.winner[name]}
        factor = math.prod(self.effects.get(name, 1.0) for name in undone if KNOBS[name].active(knobs))
        return factor * math.prod(f for group, f in self.together.items() if group <= undone)

    @property
    def changes(self) -> set[str]:
        return set(changed(self.winner, self.baseline))

    def score(self, kept: set[str]) -> tuple[int, int]:
        """(changes kept that do nothing, changes undone that matter) for the changes ``kept``: a change matters
        when undoing it alone costs MATTERS or more; of a group that costs that much undone together, one must stay
        (none kept: one that matters undone; more than one: the others do nothing)."""
        alone = {name for name in self.changes if self.effects.get(name, 1.0) <= 1 - MATTERS}
        groups = [group - alone for group, f in self.together.items() if f <= 1 - MATTERS and group - alone]
        grouped = set().union(*groups)
        idle = len(kept - alone - grouped) + sum(max(0, len(kept & group) - 1) for group in groups)
        return idle, len(alone - kept) + sum(not kept & group for group in groups)


def _winner_with(**values: Any) -> dict[str, Any]:
    return MYMODEL_BASELINE | values


# The example's winner on an Intel Xeon with AMX (2026-12-03).
AMX_WINNER = _winner_with(
    num_workers=2,
    prefetch_factor=2,
    persistent_workers=True,
    num_threads=1,
    channels_last=True,
    amp="bf16",
    malloc="keep",
)

# Undoing each of the README winner's changes, from section 7's benchmark (tuned/recommended.yaml at d8c746c, 5
# rounds): without workers 1.08x against 1.96x, without one thread 1.47x, without channels_last 1.73x, without
# malloc=keep 1.69x, without batch 64 1.94x; persistent workers: est. (the README's trim kept them).
SCENARIOS = {
    "mymodel, the README's winner (8 changes, 5 matter)": Scenario(
        MYMODEL_BASELINE,
        MYMODEL_WINNER,
        {"num_workers": 0.55, "num_threads": 0.75, "channels_last": 0.88, "malloc": 0.86, "persistent_workers": 0.93},
        baseline_relative=1 / 1.96,
    ),
    "6 changes, 1 matters": Scenario(
        MYMODEL_BASELINE,
        MYMODEL_WINNER | {"persistent_workers": None, "num_workers": 0, "prefetch_factor": None},
        {"num_threads": 0.70},
    ),
    "4 changes, all matter by 5 %": Scenario(
        MYMODEL_BASELINE,
        _winner_with(batch_size=64, num_threads=1, channels_last=True, malloc="keep"),
        {"batch_size": 0.95, "num_threads": 0.95, "channels_last": 0.95, "malloc": 0.95},
    ),
    "4 changes, 1 matters, 2 redundant (either gives 15 %)": Scenario(
        MYMODEL_BASELINE,
        _winner_with(batch_size=64, num_threads=1, optimizer_impl="foreach", set_to_none=False),
        {"num_threads": 0.75},
        {frozenset({"batch_size", "optimizer_impl"}): 0.85},
    ),
    # Undoing each change of the example's winner on an Intel Xeon with AMX (2026-12-03; the medians of the trim's
    # first race, 3 rounds, over the winner's): bf16 0.90x, channels_last 0.89x, workers 0.55x, one thread 0.56x.
    "mymodel on a Xeon with AMX (6 changes, 4 matter)": Scenario(
        MYMODEL_BASELINE,
        AMX_WINNER,
        {"num_workers": 0.55, "num_threads": 0.56, "channels_last": 0.89, "amp": 0.90},
        baseline_relative=0.53,
    ),
    # The same Xeon in windows of whole epochs (2026-12-05): a race's winner whose trim undid malloc, batch 128 and
    # persistent workers one race at a time, each within noise, and whose pick re-measured 0.888 (0.863-0.915) of it
    # (benchmarks.picks, 6 rounds: without malloc 0.954, then batch 32 with persistent workers 0.920); undoing
    # each of the other four, from its trim's first race (3 rounds, the medians over the winner's).
    "mymodel on a Xeon with AMX, whole epochs (7 changes, all matter)": Scenario(
        MYMODEL_BASELINE,
        AMX_WINNER | {"batch_size": 128},
        {
            "num_workers": 0.54,
            "num_threads": 0.76,
            "channels_last": 0.89,
            "amp": 0.86,
            "malloc": 0.954,
            "batch_size": 0.964,
            "persistent_workers": 0.965,
        },
        baseline_relative=0.50,
    ),
}


@dataclass(frozen=True)
class Outcome:
    runs: int  # the trim's runs, the baseline's included
    ratio: float  # the trimmed configuration's true throughput over the winner's
    kept_idle: int  # changes kept that do nothing (``Scenario.score``)
    dropped_needed: int  # changes undone that matter
    # the chosen configuration's true gain over the baseline (None where the race proved nothing), and its stated
    # gain's 95 % interval from the race that proved it alone, from the rounds the tuner counts (``paired_rounds``) and
    # from every round of every race that ran it beside the baseline; an interval is None where its rule keeps the
    # baseline (no proof; for the tuner's rule, a proof taken back too) or one round gives no interval
    gain: float | None = None
    proof_interval: RatioInterval | None = None
    pooled_interval: RatioInterval | None = None
    every_interval: RatioInterval | None = None


def _intervals(label: str, races: list[Confirmation]) -> tuple[RatioInterval | None, ...]:
    """The gain's 95 % intervals of the configuration ``label``: over the race that proves it alone (``proof_of``),
    over the rounds the tuner counts (``paired_rounds``: those and every other round that did not choose it; none
    where they take the proof back, ``GainRounds.takes_proof_back``, and the tuner keeps the baseline), and
    over every round of every race that ran it beside the baseline, the rounds that chose it included."""
    proof = trim_rules.proof_of(label, races)
    if proof is None:
        return None, None, None
    index = race_index(proof, races)
    counted = paired_rounds(index, proof.winner.label, races)
    alone = list(GainRounds(tuple(p for p in counted.rounds if p.race == index), index).counted().values())
    pooled = [] if counted.takes_proof_back else list(counted.counted().values())  # the tuner keeps the baseline
    entrants = [(race, next((f for f in race.finalists if f.knobs == proof.winner.knobs), None)) for race in races]
    every = [run / base for race, f in entrants if f for run, base in zip(*race.paired(f), strict=True)]
    return tuple(ratio_interval(ratios) if len(ratios) > 1 else None for ratios in (alone, pooled, every))


# What sets the finalists' race's rivals apart from its winner (``--finalists``): knobs no scenario's winner changes,
# whose values a CPU runs, each rival changing one more than the one before.
RIVAL_KNOBS = {"pin_memory": True, "cudnn_benchmark": True, "compile": "default"}


def simulate_trim(
    scenario: Scenario, noise: Noise, rounds: int, rng: random.Random, finalists: int = 1, rival: float = 1.0
) -> Outcome:
    """The winner's race against the baseline (``rounds`` rounds), then its trim, on simulated runs: what the tuner
    then recommends (the baseline where the race proved nothing, as ``Summary`` does). With ``finalists`` over 1, the
    finalists' race is the tuner's own (``run_race.race``, its early verdict on; the trim races its winner, so it ends
    there, as ``trim_ahead`` has it), the winner against rivals each reading ``rival`` times its throughput, all of
    them chosen from one search run each."""
    round_effects: dict[str, float] = {}
    runs = 0

    def truth(knobs: dict[str, Any]) -> float:
        rivalry = rival if any(knobs[name] == value for name, value in RIVAL_KNOBS.items()) else 1.0
        return rivalry * scenario.relative(knobs)

    def result_of(knobs: dict[str, Any], round_key: str) -> Any:
        effect = round_effects.setdefault(round_key, rng.gauss(0.0, noise.round_sd))
        throughput = truth(knobs) * math.exp(effect + noise.run(rng))
        return SimpleNamespace(knobs=knobs, ok=True, timing=SimpleNamespace(throughput=throughput),
                               peak_memory_mb=100.0, failure=None, to_dict=dict, disturbed=False)  # fmt: skip

    def measure(knobs: dict[str, Any], name: str, _progress: Any) -> Any:
        nonlocal runs
        runs += 1
        return result_of(knobs, "-".join(name.split("-")[:3]))  # trim-RACE-ROUND

    changes = count_changes(scenario.winner, scenario.baseline)
    if finalists > 1:
        confirmation = _finalists_race(scenario, rounds, finalists, result_of)
        winner = confirmation.winner or confirmation.finalists[0]
    else:
        base_runs = [result_of(scenario.baseline, f"confirm-{i}").timing.throughput for i in range(rounds)]
        winner_runs = [result_of(scenario.winner, f"confirm-{i}").timing.throughput for i in range(rounds)]
        winner = Finalist("winner", scenario.winner, changes, 100.0, winner_runs)
        confirmation = Confirmation(base_runs, [winner], planned_rounds=rounds)
    baseline = TrialRecord("baseline", SimpleNamespace(knobs=scenario.baseline))
    results = StudyResults("model", "model", "cpu", {}, {}, {}, baseline)
    trim = run_trim(UnstoredStudy(), results, confirmation, measure, lambda name, result: None)
    chosen = next((step.left for step in reversed(trim_path(trim)) if step.left), winner)
    final = scenario.baseline if confirmation.winner is None else chosen.knobs
    score = scenario.score(set(changed(final, scenario.baseline)) - RIVAL_KNOBS.keys())  # the scenario's changes
    if confirmation.winner is None:
        return Outcome(runs, truth(final), *score)
    gain = truth(final) / truth(scenario.baseline)
    intervals = _intervals(chosen.label, [confirmation, *trim])
    return Outcome(runs, truth(final), *score, gain, *intervals)


def _finalists_race(
    scenario: Scenario, rounds: int, finalists: int, result_of: Callable[[dict[str, Any], str], Any]
) -> Confirmation:
    """The finalists' race of ``scenario``'s winner and ``finalists`` - 1 rivals (``RIVAL_KNOBS``), by the tuner's
    rules, each entrant and the baseline with a search run before it; it ends at its verdict."""
    entrants, knobs = [], dict(scenario.winner)
    for index, (name, value) in enumerate([(None, None), *RIVAL_KNOBS.items()][:finalists]):
        if name is not None:
            knobs = {**knobs, name: value}
        changes = count_changes(knobs, scenario.baseline)
        entrants.append(Finalist("winner" if index == 0 else f"rival {index}", knobs, changes, 100.0))
    before = {f.label: result_of(f.knobs, f"search-{f.label}").timing.throughput for f in entrants}
    before["baseline"] = result_of(scenario.baseline, "search-baseline").timing.throughput

    def run(knobs: dict[str, Any], name: str, _progress: Any) -> Any:
        return result_of(knobs, "-".join(name.split("-")[:2]))  # confirm-ROUND

    return run_race.race(
        entrants, scenario.baseline, before, rounds, "confirm", run, lambda name, result: None, runs_out=lambda w: False
    )


def noise_aware_beats(run_sd: float, z: float) -> Callable[[Finalist, Finalist], bool]:
    """A keep rule for the trim that knows a run's noise (``run_sd``, the model's own: a bound on what a rule that
    estimated it could do): ``faster`` beats ``other`` where, besides ``beats``' rounds won, the mean of their paired
    log-ratios exceeds ``z`` standard errors of it as well as the tolerance."""

    def beats(faster: Finalist, other: Finalist) -> bool:
        pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
        won = sum(a > b for a, b in pairs)
        mean = statistics.fmean(math.log(a / b) for a, b in pairs)
        error = math.sqrt(2) * run_sd / math.sqrt(len(pairs))
        return won > len(pairs) / 2 and mean > max(math.log(1 + TIE_TOLERANCE), z * error)

    return beats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES, help="efficiency.json files")
    parser.add_argument("--studies", type=int, default=2000, help="simulated trims per scenario")
    parser.add_argument("--rounds", type=int, default=3, help="the race's planned rounds (study.confirm_rounds)")
    parser.add_argument("--pipeline", default="images", help="whose re-measurement noise to fit")
    parser.add_argument("--run-sd", type=float, help="a run's own noise (log SD) instead of the fitted one")
    parser.add_argument(
        "--trim-margin", type=float, help="how far behind a variant leaves the trim's race (TRIM_MARGIN) instead"
    )
    parser.add_argument(
        "--trim-bound", type=float, help="what a trim may give back (TRIM_BOUND) instead; inf: no bound"
    )
    parser.add_argument(
        "--keep-z", type=float, help="keep a change only where undoing it costs Z standard errors (the noise known)"
    )
    parser.add_argument(
        "--no-early-exits", action="store_true", help="no variant leaves a trim race before its last round"
    )
    parser.add_argument(
        "--finalists", type=int, default=1, help="race the winner against this many finalists less one (up to 4)"
    )
    parser.add_argument("--rival", type=float, default=1.0, help="each rival's throughput over the winner's")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.finalists <= len(RIVAL_KNOBS) + 1:
        parser.error(f"--finalists: 1 to {len(RIVAL_KNOBS) + 1}, one more than the rivals' knobs (RIVAL_KNOBS)")
    noise = fit_noise([json.loads(path.read_text(encoding="utf-8")) for path in args.files], args.pipeline)
    if args.run_sd is not None:
        noise = Noise(noise.round_sd, args.run_sd, noise.tail_dof)
    tails = f"t, {noise.tail_dof} d.o.f." if noise.tail_dof else "normal"
    print(f"noise of {args.pipeline} (log SD): round {noise.round_sd:.3f}, run {noise.run_sd:.3f} ({tails})")
    if args.trim_margin is not None:
        run_race.TRIM_MARGIN = args.trim_margin  # read by the race at each round
    if args.trim_bound is not None:
        trim_rules.TRIM_BOUND = args.trim_bound  # read by trim_path at each call
    if args.keep_z is not None:
        trim_rules.beats = noise_aware_beats(noise.run_sd, args.keep_z)  # the trim's keep and undo rules read it
    if args.no_early_exits:
        run_race.TRIM_MARGIN = math.inf
        run_race.beaten_for_good = lambda *_: False
    rng = random.Random(args.seed)
    for name, scenario in SCENARIOS.items():
        simulated = partial(simulate_trim, scenario, noise, args.rounds, rng, args.finalists, args.rival)
        outcomes = [simulated() for _ in range(args.studies)]
        ratios = sorted(o.ratio for o in outcomes)
        print(
            f"{name}: {statistics.fmean(o.runs for o in outcomes):5.1f} runs; trimmed >= 0.97 of the winner in "
            f"{sum(r >= 0.97 for r in ratios) / len(ratios):6.1%} (5th percentile {ratios[len(ratios) // 20]:.3f}); "
            f"idle changes kept {statistics.fmean(o.kept_idle for o in outcomes):.2f}, "
            f"changes that matter undone {statistics.fmean(o.dropped_needed for o in outcomes):.2f}"
        )
        for which, over in (("proof", "its proof's rounds alone"), ("pooled", "the rounds the tuner counts"),
                            ("every", "every race's rounds that ran it")):  # fmt: skip
            print(f"    the gain over {over}: {_coverage(outcomes, f'{which}_interval')}")


def _coverage(outcomes: list[Outcome], which: str) -> str:
    """How often the interval ``which`` of ``outcomes`` holds the true gain, and its median width (high over low)."""
    held = [(o.gain, getattr(o, which)) for o in outcomes if getattr(o, which) is not None]
    if not held:
        return "none"
    covers = sum(interval.low <= gain <= interval.high for gain, interval in held) / len(held)
    width = statistics.median(interval.high / interval.low for _, interval in held)
    rounds = statistics.median(interval.n for _, interval in held)
    reads = math.exp(statistics.fmean(math.log(interval.geomean / gain) for gain, interval in held))
    return (
        f"reads {reads:.3f}x the true gain and holds it in {covers:.1%} of {len(held)} (median {rounds:g} rounds, "
        f"high/low {width:.2f})"
    )


if __name__ == "__main__":
    main()
