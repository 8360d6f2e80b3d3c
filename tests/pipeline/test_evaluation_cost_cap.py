"""The evaluation jobs under the run's cost cap (max_cost_usd), in the synthesized machines on the virtual
clock (docs/registry.md, "Cost cap"): the planned cost counts the evaluation job, and an evaluation job
billed past what the run has left is stopped, the run failing BudgetExceeded with its model kept.

small-torchrun (1 x ml.g5.12xlarge, registry: auto) gets a cap of $1.00 and max_steps 1,000, which plan
$0.33 of training and $0.40 of evaluation (config validation refuses a cap below the profile's own plan); a
run of 2,000 steps plans $0.66 of training, under the cap alone, and the evaluation on top."""

from __future__ import annotations

import pytest

from localaws.sagemaker import BILLED_TRAINING, COMPLETED, STARTING, evaluated
from tests.conftest import synthesize
from tests.pipeline.conftest import REGISTRY_PROFILE, synthesized_pipeline
from tests.pipeline.test_registry import versions
from tests.queue.test_queue_config import settings_with, with_profile_field
from trainstack.cost_cap import evaluation_cost_usd, planned_cost_usd, usd
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.prices import offline_training_prices

CAP = 1.0
PROFILE_INDEX = 3  # small-torchrun in config/default.yaml
LONGER = {"max_steps": "2000"}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The default config with small-torchrun capped (overrides the session's `pipeline` for `registry`)."""
    hyperparameters = {"model_preset": "125m", "max_steps": "1000"}
    profiles = with_profile_field(PROFILE_INDEX, max_cost_usd=CAP, hyperparameters=hyperparameters)
    settings = settings_with({"profiles": profiles})
    assert settings.profiles[PROFILE_INDEX].name == REGISTRY_PROFILE
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("capped.cdk.out"))
    return synthesized_pipeline(settings, stacks, assembly)


def test_the_planned_cost_counts_the_evaluation_job(registry, pipeline):
    """Fails on a plan of the training alone ($0.66, under the cap)."""
    profile = pipeline.settings.profile(REGISTRY_PROFILE)
    prices = offline_training_prices(pipeline.settings.region)
    planned = planned_cost_usd(profile, LONGER, None, prices)
    evaluation = evaluation_cost_usd(profile, prices)
    assert planned - evaluation < CAP < planned
    run = registry()
    execution_input = {"profile": REGISTRY_PROFILE, "runName": "trainstack-eplan", "hyperparameters": LONGER}
    outcome = run.sm.run(execution_input, name="eplan")
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.cause == (
        f"The run's planned cost of {usd(planned)} exceeds the max_cost_usd of {usd(CAP)} of profile "
        f"{REGISTRY_PROFILE}; lower max_steps or instanceCount, or raise max_cost_usd."
    )
    assert run.sm.fake.create_calls == 0
    with pytest.raises(InvalidInputError) as refused:
        validate_execution_input(
            {"profile": REGISTRY_PROFILE, "hyperparameters": LONGER}, pipeline.settings, "e"
        )
    assert str(refused.value) == outcome.cause


def test_an_evaluation_job_billed_past_the_cap_is_stopped_and_the_run_fails_budget_exceeded(registry):
    """Training bills about $0.40; the evaluation job then bills on until the run's cost passes $1.00.
    Fails on a registration machine that leaves evaluation out of the cap: the job completes and the
    version is registered."""
    sm = registry().sm
    sm.fake.now = sm.clock.time
    sm.fake.behaviour.script([[STARTING, *[BILLED_TRAINING] * 3, COMPLETED]])
    sm.fake.behaviour.script_evaluations([*[BILLED_TRAINING] * 30, *evaluated(2.0)])
    name = "trainstack-ecap"
    # 1,000 steps plan $0.33 of training: the run starts.
    execution_input = {"profile": REGISTRY_PROFILE, "runName": name, "hyperparameters": {"max_steps": "1000"}}
    outcome = sm.run(execution_input, name=name)
    assert (outcome.status, outcome.error) == ("FAILED", "BudgetExceeded"), outcome.cause
    assert sm.fake.stop_requests == [f"{name}-eval"]
    assert sm.fake.jobs[f"{name}-eval"].current().status == "Stopped"  # no job left running
    assert outcome.cause.startswith(
        f"Evaluation job {name}-eval: Training job {name}-eval was stopped by the pipeline: the run's billed "
        "cost reached $1."
    )
    assert f"over its max_cost_usd of {usd(CAP)}" in outcome.cause
    assert outcome.cause.endswith(
        f"Evaluation jobs tried: 1. The model stays at s3://trainstack-artifacts-test/{name}/{name}-1/output/"
        "model/; it is not registered."
    )
    assert versions() == []
