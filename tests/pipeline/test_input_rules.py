"""The pipeline's JSONata input check, evaluated on its own for configs the scenario tests do not use."""

from __future__ import annotations

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from stacks.pipeline.pipeline_input_rules import check_input_expression, profile_table
from tests.domain.conftest import S3_RESOURCES
from trainstack.execution_input import InvalidInputError, validate_execution_input


def check(settings, execution_input, execution_name: str = "exec"):
    states = {"input": execution_input, "context": {"Execution": {"Name": execution_name}}}
    profiles = profile_table(settings.profiles, S3_RESOURCES)
    return jsonata_evaluator(VirtualClock())(
        check_input_expression(settings), {"states": states, "profiles": profiles}
    )


@pytest.fixture
def cpu_profile_settings(make_settings):
    """A profile on a CPU type without EFA: one instance only."""
    data = {
        "name": "cpu-check",
        "strategy": "torchrun",
        "instance_preferences": [{"instance_type": "ml.c5.4xlarge", "instance_count": 1}],
    }
    settings = make_settings()
    return settings.model_copy(update={"profiles": [*settings.profiles, type(settings.profiles[0])(**data)]})


def test_an_instance_count_the_profile_rules_out_is_rejected_by_both(cpu_profile_settings):
    execution_input = {"profile": "cpu-check", "instanceCount": 2}
    problem = check(cpu_profile_settings, execution_input)["problem"]
    assert problem == "instanceCount 2 does not fit profile cpu-check: it allows 1."
    with pytest.raises(InvalidInputError) as rejected:
        validate_execution_input(execution_input, cpu_profile_settings, "exec")
    assert str(rejected.value).startswith("instanceCount 2 does not fit profile cpu-check: ")
    assert rejected.value.field == "instanceCount"


def test_a_valid_input_has_no_problem_and_gets_its_defaults(cpu_profile_settings):
    checked = check(cpu_profile_settings, {"profile": "cpu-check", "instanceCount": 1})
    assert checked["problem"] is None
    assert checked["input"]["runName"] == "trainstack-exec"
    assert checked["profile"]["name"] == "cpu-check"


@pytest.mark.parametrize("name", ["retrain!", "team's-run", "run(2)", "größe", "run 2"])
def test_an_execution_name_unsafe_in_a_tag_value_is_refused_by_both(make_settings, name):
    # Step Functions accepts these names; the ARN would break SageMaker's tag value pattern (or JSONata
    # could not tell a letter from a symbol outside ASCII).
    settings = make_settings()
    expected = (
        "The execution name may hold only letters A-Z and a-z, digits and _ . = + - @ (the pipeline tags "
        "its training jobs with the execution's ARN); start the execution under another name."
    )
    assert check(settings, {"runName": "trainstack-ok"}, name)["problem"] == expected
    with pytest.raises(InvalidInputError, match=r"^The execution name may hold only"):
        validate_execution_input({"runName": "trainstack-ok"}, settings, name)


@pytest.mark.parametrize("name", ["nightly-2026.12.01", "a_b=c+d@e", "trainstack-run.2"])
def test_tag_safe_execution_names_pass_both(make_settings, name):
    settings = make_settings()
    assert check(settings, {"runName": "trainstack-ok"}, name)["problem"] is None
    validate_execution_input({"runName": "trainstack-ok"}, settings, name)
