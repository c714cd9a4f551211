"""The study's sampler: a proposal held by the thread that asks for its trial, and by nobody else."""

from __future__ import annotations

import pickle
import threading

import optuna
import pytest

from autotune.study.proposing import ProposingSampler, proposing

CHOICES = {"a": [1, 2, 3], "b": ["x", "y"]}


class FirstChoice(optuna.samplers.RandomSampler):
    """Optuna's sampler, made predictable: the first choice of every parameter."""

    def sample_independent(self, study, trial, param_name, param_distribution):
        return param_distribution.choices[0]


def suggested(trial: optuna.Trial) -> dict:
    return {name: trial.suggest_categorical(name, choices) for name, choices in CHOICES.items()}


def test_a_trial_asked_for_with_a_proposal_takes_it_and_others_asked_meanwhile_do_not():
    study = optuna.create_study(sampler=ProposingSampler(FirstChoice()))
    proposal, held, asked_meanwhile, taken = {"a": 3, "b": "y"}, threading.Event(), threading.Event(), {}

    def tuner_with_a_proposal():
        with proposing(study, proposal):
            held.set()
            asked_meanwhile.wait(5)  # another tuner asks here, between this one's proposing and its asking
            taken["proposer"] = suggested(study.ask())

    thread = threading.Thread(target=tuner_with_a_proposal)
    thread.start()
    held.wait(5)
    taken["another"] = suggested(study.ask())
    asked_meanwhile.set()
    thread.join()
    assert taken == {"proposer": proposal, "another": {"a": 1, "b": "x"}}
    assert suggested(study.ask()) == {"a": 1, "b": "x"}, "the proposal ends with its block"


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # TPE's group
def test_a_proposal_is_taken_whole_by_a_multivariate_tpe_past_its_random_start():
    tpe = optuna.samplers.TPESampler(seed=0, n_startup_trials=2, multivariate=True, group=True)
    study = optuna.create_study(sampler=ProposingSampler(tpe))
    for _ in range(6):  # TPE's relative sampling now proposes every parameter
        trial = study.ask()
        study.tell(trial, 1.0 if suggested(trial) == {"a": 1, "b": "x"} else 0.0)
    for proposal in ({"a": 3, "b": "y"}, {"a": 2, "b": "x"}):
        with proposing(study, proposal):
            assert suggested(study.ask()) == proposal


def test_a_parameter_the_proposal_does_not_name_is_sampled_and_a_user_enqueued_value_wins():
    study = optuna.create_study(sampler=ProposingSampler(FirstChoice()))
    with proposing(study, {"a": 2}):
        assert suggested(study.ask()) == {"a": 2, "b": "x"}
        study.enqueue_trial({"a": 3})
        assert suggested(study.ask())["a"] == 3


def test_proposing_needs_the_sampler_open_study_gives_and_a_copy_of_it_holds_no_proposal():
    with pytest.raises(TypeError, match="ProposingSampler"):
        proposing(optuna.create_study(), {"a": 1})
    with proposing(optuna.create_study(), None):
        pass  # nothing proposed: any sampler does
    sampler = ProposingSampler(FirstChoice())
    with sampler.proposing({"a": 3}):
        copy = pickle.loads(pickle.dumps(sampler))
    assert copy._proposed() is None and isinstance(copy._base, FirstChoice)
