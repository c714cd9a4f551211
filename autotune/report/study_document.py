"""A study's report as a Document (``build_document``): its sections in order; here those on the search's trials (the
ranking, the probe's predictions, the Pareto front, the failed and the unmeasured), the training, the profiles, the
knobs' importance, the tuner's time, the method and the machine."""

from __future__ import annotations

from typing import Any

from autotune.knobs import KNOBS, changed
from autotune.measure.warmup import WarmupPolicy
from autotune.report import plots
from autotune.report.document import Document, Section, Table, machine_lines, present, table_of
from autotune.report.headline import before_after_table, headline, metric
from autotune.report.profile_plots import paired_stage_bars
from autotune.report.profiles import current_profiles, describe, side_by_side_rows, sides
from autotune.report.races import busy_machine_sections, confirmation_sections, trim_sections
from autotune.report.rows import busy_note, marked, ranked_rows
from autotune.report.tuner_time import budget_lines, covers, forecast_lines
from autotune.results.advice import batch_advice
from autotune.results.batch_limit import batch_limit
from autotune.results.compile_payback import compile_payback
from autotune.results.model import IMPORTANCE_MIN_TRIALS, StudyResults
from autotune.results.race_rules import TIE_TOLERANCE
from autotune.results.summary import Summary
from autotune.results.tuner_time import PHASE_WORDS, STAGE_WORDS, shares
from autotune.words import percents

RANKED_COLUMNS = [
    ("rank", "rank"),
    ("trial", "trial"),
    ("changes", "changes from the baseline"),
    ("measured", "measured"),
    ("ranked_sps", "samples/s"),
    ("ranked_speedup", "vs baseline"),
    ("mean_step_ms", "mean step ms"),
    ("data_stall_fraction", "data wait"),
    ("compile_s", "compile s"),
    ("peak_memory_mb", "peak MiB"),
]


def build_document(results: StudyResults, summary: Summary) -> Document:
    sections = [
        *confirmation_sections(results, summary),
        *trim_sections(summary),
        *busy_machine_sections(summary),
        Section(
            "Before and after",
            paragraphs=[
                f"Throughput{' and peak memory' if summary.race_peak_memories else ''}: {summary.throughput_basis}, "
                "as in the recommendation above. Every other figure comes from one measured run of each configuration "
                "(a search trial's run has the shorter screening window)."
            ],
            table=before_after_table(summary),
            plots=[plots.before_after(summary), plots.time_split(summary)],
        ),
        *_profiles(results, summary),
        Section("Training", paragraphs=_training(results, summary)),
        *_probe(results),
        *_pareto(summary),
        Section(
            "All configurations, ranked",
            paragraphs=[ranked_basis(summary)],
            table=_ranked(summary),
            plots=present(plots.trials_in_order(results, summary), plots.throughput_by_batch(summary)),
        ),
        *_importance(results),
        *_failures(summary),
        *_not_measured(results),
        *_tuner_time(results),
        Section("How it was measured", paragraphs=[_method(results, summary)]),
        Section("Machine", bullets=[*machine_lines(results.machine, results.device), *_other_machines(results)]),
    ]
    return Document(f"autotune report: {results.pipeline}", headline(summary), sections)


def _training(results: StudyResults, summary: Summary) -> list[str]:
    """What the recommendation means for training: a changed batch size, the batch sizes that fit, compile's cost."""
    payback = compile_payback(results, summary)
    return [
        batch_advice(results, summary).describe(),
        *batch_limit(results).sentences(),
        *(payback.sentences() if payback else []),
    ]


def _profiles(results: StudyResults, summary: Summary) -> list[Section]:
    """The baseline and the recommendation side by side as profiled after the race: what limits each and what to
    change (none where the study holds no profiles of these two: study.diagnose=false, or a run stopped first)."""
    profiles = current_profiles(results.profiles, summary)
    if profiles is None:
        return []
    headers, rows = side_by_side_rows(profiles)
    named = sides(profiles)
    ran = {name: record.result.stages for name, record in named.items() if record.result is not None}
    name, last = list(named.items())[-1]
    measured_by = "the race's" if summary.confirmed else "from single runs"
    lead = (
        "Each configuration was then taken apart in a profiling run of its own, as mode=profile does "
        "(docs/profile.md): the step's stages, a torch.profiler trace, the data pipeline's hot functions under "
        "cProfile; the verdict is the first rule that holds (autotune/results/diagnosis.py). These figures are the "
        f"profiling runs', slowed by their instruments; the throughputs above are {measured_by}. Advice for the "
        "recommendation leaves out the knobs it already changes and says which values the tuner measured."
    )
    advice = last.diagnosis.advice if last.diagnosis else []
    if advice:
        no_gain = any(a.measured_no_gain for a in advice)
        last_ones = f", then what the tuner measured no faster beyond noise ({TIE_TOLERANCE:.0%})" if no_gain else ""
        lead += f" Below the table: what to change next in the {name}, most effective first{last_ones}."
    return [
        Section(
            "What limits each: the baseline and the recommendation profiled",
            paragraphs=[lead],
            table=Table(headers, rows),
            bullets=[describe(a) for a in advice],
            plots=[paired_stage_bars(ran)] if ran else [],
        )
    ]


def _importance(results: StudyResults) -> list[Section]:
    completed = sum(record.result.ok for record in results.trials)
    if not results.importance and 0 < completed < IMPORTANCE_MIN_TRIALS:
        text = (
            f"Optuna's importance is left out: from fewer than {IMPORTANCE_MIN_TRIALS} completed trials (this study "
            f"has {completed}) it ranks knobs little better than chance (docs/benchmarks.md). Each change's share "
            "is measured instead: where the race ran, by racing its winner with each change undone (above), and "
            "by mode=benchmark."
        )
        return [Section("Which knobs mattered", paragraphs=[text])]
    if not results.importance:
        return []
    text = (
        "How much each knob that varied among the search's trials mattered to reaching the best throughputs, by "
        "Optuna's PED-ANOVA (the best half of the trials against all of them). The search chose which "
        "configurations to measure, so this describes the trials run, not every possible configuration; the races "
        "above measure each change."
    )
    shares = [f"{name}: {share:.2f}" for name, share in results.importance.items()]
    return [
        Section(
            "Which knobs mattered",
            paragraphs=[text],
            bullets=shares,
            plots=present(plots.importance(results.importance)),
        )
    ]


def _ranked(summary: Summary) -> Table:
    rows = [_with_changes(row, summary) for row in ranked_rows(summary) if row["state"] == "complete"]
    for row in rows:
        row["trial"] = marked(row, summary)
    cells = [[metric(key, row[key]) for key, _ in RANKED_COLUMNS] for row in rows]
    return table_of([title for _, title in RANKED_COLUMNS], cells)


def ranked_basis(summary: Summary) -> str:
    """What the rank below rests on (``Summary.ranked``, ``Summary.standing``, ``Summary.race_of``), in short."""
    rows = [row for row in ranked_rows(summary) if row["state"] == "complete"]
    own = "own run (measured: search run) against the baseline's run"
    if summary.race_of(summary.baseline) is None:
        return f"Ranked by each configuration's {own}." + busy_note(rows)
    kept = "the baseline (kept) first, " if summary.is_baseline else "the recommendation first, "
    lead = kept if summary.race_of(summary.recommended) is not None else ""
    basis = (
        f"Ranked first the configurations a race measured, {lead}by their figures in the race named under measured, "
        "over the rounds counted there (those the baseline ran too; the recommendation's and the baseline's, every "
        "round the headline's gain counts): the median, and its ratio to the baseline's median over the same rounds. "
        f"Then the others, by their {own}. The columns after vs baseline are each "
        "configuration's own run's."
    )
    return basis + busy_note(rows)


def _with_changes(row: dict[str, Any], summary: Summary) -> dict[str, Any]:
    """``row`` with its knobs as one cell: the knobs that differ from the baseline (every knob: trials.csv)."""
    return {**row, "changes": _changes_from(summary.baseline, {name: row[name] for name in KNOBS})}


def _probe(results: StudyResults) -> list[Section]:
    probe = results.probe
    if probe is None:
        return []
    heading = "Where the time goes (differential probe)"
    if not probe.ok:
        said = f"The probe failed ({probe.failure}); any search trial went on without it."
        if probe.retry:  # study.budget_s left it no time to end or to run again: ``ProbeRecord.retry``
            said += " A later run probes anew."
        return [Section(heading, paragraphs=[said])]
    loading, compute = probe.baseline_loader_sps, probe.baseline_compute_sps
    slower = "the DataLoader" if loading < compute else "the model step"
    text = (
        f"Timed apart at the baseline's settings, the DataLoader alone delivered {loading:.1f} samples/s and the "
        f"model step alone (on a cached batch) {compute:.1f} samples/s: {slower} is the slower half. From such "
        f"timings ({probe.wall_s:.1f} s in all) the probe predicted each configuration's throughput; each trial "
        "measured the configuration predicted fastest, its prediction corrected by the trials measured before it, "
        "until none left was predicted to beat the best or come within a run's noise of it, or study.n_trials ran "
        "out (no prediction: a twin of the best with a knob the probe "
        "does not time, such as torch.compile). The prediction only orders the search; every figure in this report "
        "is measured."
    )
    rows = [
        [r.label, _changes_from(results.baseline, r.result.knobs), _predicted(r.predicted_sps), r.throughput]
        for r in results.trials
    ]
    table = table_of(["trial", "changes from the baseline", "predicted samples/s", "measured samples/s"], rows)
    return [Section(heading, paragraphs=[text], table=table)]


def _predicted(sps: float | None) -> float | str:
    """A trial's predicted throughput, or why there is none: a twin of the best by a knob the probe does not time."""
    return "none (an untimed knob)" if sps is None else sps


def _changes_from(baseline, knobs: dict[str, Any]) -> str:
    return ", ".join(f"{name}={after}" for name, (_, after) in changed(knobs, baseline.result.knobs).items()) or "none"


def _pareto(summary: Summary) -> list[Section]:
    if not summary.pareto:
        return []
    base = summary.baseline.throughput
    rows = [
        [
            r.label,
            r.throughput,
            r.throughput / base,
            r.result.peak_memory_mb,
            _changes_from(summary.baseline, r.result.knobs),
        ]
        for r in summary.pareto
    ]
    table = table_of(["trial", "samples/s", "vs baseline", "peak MiB", "changes from the baseline"], rows)
    intro = (
        "No configuration is both faster and leaner than these (study.objectives=[throughput, peak_memory]), each by "
        "its own run."
    )
    section = Section(
        "Pareto front: throughput against peak memory", [intro], table, plots=present(plots.pareto(summary))
    )
    return [section]


def _failures(summary: Summary) -> list[Section]:
    failed = [row for row in ranked_rows(summary) if row["state"] != "complete"]
    if not failed:
        return []
    rows = [
        [
            row["trial"],
            row["state"],
            _with_changes(row, summary)["changes"],
            row["throughput_sps"],
            row["failure_reason"],
        ]
        for row in failed
    ]
    headers = ["trial", "state", "changes from the baseline", "samples/s", "reason"]
    return [Section("Pruned, infeasible and failed configurations", table=table_of(headers, rows))]


def _not_measured(results: StudyResults) -> list[Section]:
    """The configurations the search ruled out unmeasured, and why: the trial numbers the ranking skips."""
    if not results.not_measured:
        return []
    rows = [[n.label, _changes_from(results.baseline, n.knobs), n.reason] for n in results.not_measured]
    text = (
        "What a failure showed would fail too was not run: a configuration needing no less memory than one that ran "
        "out, or loading in DataLoader workers after two trials failed in one while no configuration with workers ran."
    )
    table = table_of(["trial", "changes from the baseline", "why not measured"], rows)
    return [Section("Not measured", paragraphs=[text], table=table)]


def _tuner_time(results: StudyResults) -> list[Section]:
    """Where the tuner's own time went, stage by stage and phase by phase (none where the study did not record it)."""
    split = results.tuner_time
    if split is None:
        return []
    text = (
        f"The tuner's {split.wall_s:.0f} s ({covers(split)}), from the start of each run to its reports, by stage "
        "and, within each, by the phases of its trial processes: start-up (the interpreter and imports, or the fork), "
        "the pipeline's build, warm-up, compile, the timed windows, the probe's probing, the profiling runs' "
        "profiling, the rest of each process (DataLoader shutdown, the FLOP count, memory reads, exit), stopped "
        "trials (pruned, timed out or crashed: no breakdown comes back), waiting for other tuners of a shared study "
        "(their trials and searches on this machine, their turn at the race), idle parallel slots (study.parallel: "
        "a slot with nothing left to run while another's trial still ran), and the tuner's own work between them "
        "(what remains of the stage's time). With several trials at once each counts its share."
    )
    stage_shares = percents(shares(split.stages()))
    rows = [
        [STAGE_WORDS.get(stage, stage), sum(parts.values()), f"{stage_shares[stage]}%", _phases_in_words(parts)]
        for stage, parts in split.by_stage().items()
    ]
    rows.append(["all", split.wall_s, "100%", _phases_in_words(split.phases())])
    table = table_of(["stage", "seconds", "share", "of which (seconds)"], rows)
    paragraphs = [text, *forecast_lines(split), *budget_lines(split)]
    return [Section("Where the tuner's time went", paragraphs=paragraphs, table=table, plots=[plots.tuner_time(split)])]


def _phases_in_words(seconds: dict[str, float]) -> str:
    return ", ".join(f"{PHASE_WORDS[phase]} {value:.1f}" for phase, value in seconds.items() if round(value, 1))


def _windows_of_whole_epochs(results: StudyResults) -> str:
    """How many of the windows of the baseline and the search ended on whole epochs, in words ("" where none
    did)."""
    timings = [r.result.timing for r in [results.baseline, *results.trials] if r is not None and r.result.timing]
    whole = sum(timing.epochs > 0 for timing in timings)
    if not whole:
        return ""
    return (
        f" {whole} of the {len(timings)} windows of the baseline and the search ended on whole epochs (DataLoader "
        "workers whose epochs were short enough: docs/measurement.md), so that they held the stalls of the epochs' "
        "starts as often as training does."
    )


def _method(results: StudyResults, summary: Summary) -> str:
    plan = results.measure
    warmup = WarmupPolicy(**plan["warmup"]).on(results.device.split(":")[0])
    lasting = f" and at least {warmup.min_time_s:g} s" if warmup.min_time_s else ""
    repeats = plan.get("repeats", 1)
    screen = plan.get("screen")
    screened = (
        f" A search trial's window was the shorter screening one: at least {screen['min_steps']} steps and "
        f"{screen['min_time_s']:g} s; the baseline, the races and the profiles ran the full one."
        if screen
        else ""
    )
    gpu = results.device.startswith("cuda")
    peak = (
        "Peak memory is the GPU's: the peak CUDA's caching allocator reserved (what must fit on the device; the "
        "CUDA context is not in it); the host's process tree is reported beside it. "
        if gpu
        else ""
    )
    each = (
        f"the median of {repeats} runs, each in a process of its own"
        if repeats > 1
        else "one measurement: differences of a few percent can be run-to-run noise"
    )
    own = "Each figure of a trial's own run (the tables of trials; the ranking's search runs)"
    repeated = f"{own} is {each}.{_of_rounds(summary)}"
    return (
        f"Each configuration ran in a process of its own on {results.device}. Warm-up (compilation happens here and "
        f"is reported as compile s) lasted until the median of the last {warmup.compared} step times was within "
        f"{warmup.tolerance:.0%} of the {warmup.compared} before ({warmup.min_steps} to {warmup.max_steps} "
        f"steps{lasting}; the warm-up steps counted include those run after it to use up the batches DataLoader "
        "workers loaded while the window's start was read), then a timed window of at least "
        f"{plan['min_steps']} steps and {plan['min_time_s']:g} s "
        f"(at most {plan['max_time_s']:g} s).{_windows_of_whole_epochs(results)}{screened} Each trial ran the loop "
        "a user runs: one DataLoader over its epochs, nothing waiting for a GPU inside the window but its end. "
        "Throughput is samples in the window divided by its wall time; data wait is the share of the window spent "
        f"blocked on the next batch (on a GPU: the device idle before a batch, from CUDA events). {peak}The "
        f"{'host' if gpu else 'peak'} memory sums the trial's process tree (DataLoader workers included) "
        "using PSS where the OS provides it, so shared pages are not counted twice: PSS is read outside the window; "
        "inside it, where such a read would slow the loop, resident sizes are sampled and corrected by the shared "
        "pages a PSS read of the same processes found, and the training process's high-water mark catches peaks "
        f"between. {repeated}"
    )


def _of_rounds(summary: Summary) -> str:
    """Which figures are medians of a race's interleaved rounds, as a sentence ("" where no race ran a round): the
    races', and the headline's where a race confirmed the recommendation."""
    if not any(race.rounds for race in summary.races):
        return ""
    if summary.confirmed:
        return (
            " The races' figures and the headline's throughputs are medians of their interleaved rounds, its gain the "
            "geometric mean of the rounds' paired ratios."
        )
    return " The races' figures are medians of their interleaved rounds."


def _other_machines(results: StudyResults) -> list[str]:
    """Where the study holds results of other machines too: which, and that they are ranked apart."""
    if not results.other_machines:
        return []
    others = "; ".join(
        f"{about.get('cpu_model', '?')}, {about.get('cpu_count', '?')} cores, GPU {about.get('gpu') or 'none'} "
        f"(machine {machine})"
        for machine, about in results.other_machines.items()
    )
    return [
        f"Machine {results.machine_id}. This study holds results of other machines too, never ranked with these: "
        f"{others}. `mode=report` renders one report per machine."
    ]
