"""How often the probe tells each compute knob's value apart from the anchor's (``ProbeModel.told_apart``): the
example's default search space probed ``--probes`` times, each in a fresh process, its raw timings saved
(``--results``), and every probe judged by the current rule. A value that changes the model step beyond noise should
be told apart by every probe, one that changes nothing by about FALSE_ALARM of them: a value missed is a gain the
search does not follow, one told apart by noise sends trials and races to a change that does nothing.

    .venv/bin/python -m benchmarks.probe_noise --probes 12        # results: benchmarks/results/probe_noise.json
    .venv/bin/python -m benchmarks.probe_noise --from benchmarks/results/probe_noise.json   # judged again, no probe

Each value's factor (its model step over the anchor's, at the anchor's batch size, drift taken out) is listed per
probe beside the verdict, so a reader can see which values change the step; the anchor's timings show the probe's
noise and the machine's drift."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune.knobs import COMPUTE_KNOBS
from autotune.measure.environment import describe_machine
from autotune.runner import TrialRunner, search_context
from autotune.study.probe_model import ProbeModel, probe_plan
from autotune.study.space import build_space
from autotune.trial.result import ProbeResult, probe_plan_from_dict
from benchmarks.common import settings_for

RESULTS = Path(__file__).resolve().parent / "results" / "probe_noise.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=12)
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--from", dest="stored", type=Path, help="judge the probes of this results file again")
    args = parser.parse_args()
    record = json.loads(args.stored.read_text()) if args.stored else _probe(args.pipeline, args.probes)
    if not args.stored:
        args.results.write_text(json.dumps(record, indent=1) + "\n")  # the timings first: judged again with --from
    judged = _judged([_model(probe, record["cores"]) for probe in record["probes"]])
    print(json.dumps(judged, indent=1))


def _probe(pipeline: str, count: int) -> dict[str, Any]:
    settings = settings_for(pipeline, ["measure.device=cpu"])
    probes = []
    with tempfile.TemporaryDirectory() as scratch:
        runner = TrialRunner(settings, "cpu", Path(scratch))
        ctx = search_context(settings, runner.inspect().inspection)
        plan = probe_plan(build_space(settings.search, ctx), settings.baseline)
        for index in range(count):
            result = runner.probe(plan)
            probes.append({"plan": asdict(plan), "result": result.probe.to_dict(), "wall_s": round(result.wall_s, 1)})
            print(f"probe {index + 1} of {count}: {result.wall_s:.1f} s")
    machine = describe_machine()
    return {
        "pipeline": pipeline,
        "cpu": {key: machine.get(key) for key in ("cpu_model", "cpu_flags", "cpu_count", "torch")},
        "cores": ctx.cpu_count,
        "probes": probes,
    }


def _model(probe: dict[str, Any], cores: int) -> ProbeModel:
    return ProbeModel(probe_plan_from_dict(probe["plan"]), ProbeResult.from_dict(probe["result"]), cores)


def _judged(models: list[ProbeModel]) -> dict[str, Any]:
    """Per compute knob value: the share of probes that told it apart, and each probe's factor at the anchor's
    batch size; per probe: its noise and the anchor's timings."""
    anchor = models[0].plan.computes[0]
    values = {
        (name, k[name])
        for model in models
        for k in model.plan.computes
        for name in COMPUTE_KNOBS
        if k[name] != anchor[name]
    }
    by_value = {}
    for name, value in sorted(values, key=str):
        told = [model.told_apart(name, value) for model in models]
        factors = [_factor(model, name, value) for model in models]
        by_value[f"{name}={value}"] = {
            "told_apart": round(statistics.fmean(told), 3),
            "factors": [None if f is None else round(f, 3) for f in factors],
        }
    return {
        "probes": len(models),
        "by_value": by_value,
        "noise": [None if m.noise is None else round(m.noise, 4) for m in models],
        "anchor_timings": [[round(t) for t in m.anchor_timings or []] for m in models],
    }


def _factor(model: ProbeModel, name: str, value: Any) -> float | None:
    anchor = model.plan.computes[0]
    try:
        return model.compute({**anchor, name: value}) / model.compute(anchor)
    except ValueError:
        return None


if __name__ == "__main__":
    main()
