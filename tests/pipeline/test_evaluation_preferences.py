"""The evaluation of a run asks for the instance preferences its last attempt asked for: a type SageMaker
refused for an exceeded quota stays out (stacks/pipeline/quota_waits.request_without_skipped), else the
evaluation's CreateTrainingJob would be refused for that quota again and end the run EvaluationFailed."""

from __future__ import annotations

import pytest

from localaws.sagemaker import evaluated
from tests.conftest import NO_ENV, default_config_data, synthesize
from tests.pipeline.conftest import synthesized_pipeline
from tests.pipeline.test_quota_drills import P4DE, P5, SUCCESS, busy, exceeded, preferences
from trainstack.config_loading import parse_settings

# llama-7b-smp (p5, then p4de) with a registry: block, as small-torchrun has in config/default.yaml.
REGISTERED_PROFILE = "llama-7b-smp"
REGISTRY = {"evaluation_prefix": "evaluation/llama/", "approval": "auto", "first_version": "Approved"}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """This module's pipeline: the default app with REGISTERED_PROFILE registered (overrides conftest's)."""
    data = default_config_data()
    data["profiles"] = [
        {**profile, "registry": REGISTRY} if profile["name"] == REGISTERED_PROFILE else profile
        for profile in data["profiles"]
    ]
    settings = parse_settings(data, NO_ENV, source="test config")
    return synthesized_pipeline(settings, *synthesize(settings, tmp_path_factory.mktemp("cdk.out")))


def test_the_evaluation_leaves_out_the_preference_refused_for_its_exceeded_quota(interpreter):
    sm = interpreter(job_scripts=[SUCCESS], evaluation_script=evaluated(2.0), create_errors=[exceeded(P5)])
    outcome = sm.run({"profile": REGISTERED_PROFILE, "runName": "trainstack-qeval"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["modelPackage"]["status"] == "Registered"
    assert preferences(sm.fake.jobs["trainstack-qeval-2"].request) == [P4DE]
    assert preferences(sm.fake.jobs["trainstack-qeval-eval"].request) == [P4DE]


def test_the_evaluation_of_a_run_that_met_no_refusal_asks_for_every_preference(interpreter):
    sm = interpreter(job_scripts=[SUCCESS], evaluation_script=evaluated(2.0))
    outcome = sm.run({"profile": REGISTERED_PROFILE, "runName": "trainstack-qall"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert preferences(sm.fake.jobs["trainstack-qall-eval"].request) == [P5, P4DE]


def test_a_preference_refused_only_while_busy_stays_out_of_the_evaluation_too(interpreter):
    """The run trained on p4de after p5's quota was busy; the evaluation asks for p4de, where the run got
    capacity, rather than waiting on p5's quota again (the evaluation's own waits: docs/registry.md)."""
    sm = interpreter(job_scripts=[SUCCESS], evaluation_script=evaluated(2.0), create_errors=[busy(P5)])
    outcome = sm.run({"profile": REGISTERED_PROFILE, "runName": "trainstack-qbusy"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert preferences(sm.fake.jobs["trainstack-qbusy-eval"].request) == [P4DE]
