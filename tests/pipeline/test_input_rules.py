"""The pipeline's JSONata input check, evaluated on its own for configs the scenario tests do not use."""

from __future__ import annotations

import jsonata
import pytest

from stacks.pipeline.pipeline_input_rules import check_input_expression, profile_table
from tests.domain.conftest import S3_RESOURCES
from trainstack.execution_input import InvalidInputError, validate_execution_input


def check(settings, execution_input):
    expression = jsonata.Jsonata(check_input_expression(settings))
    states = {"input": execution_input, "context": {"Execution": {"Name": "exec"}}}
    profiles = profile_table(settings.profiles, S3_RESOURCES)
    return expression.evaluate(None, {"states": states, "profiles": profiles})


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
