"""The state machine input contract as the CLI checks it (the state machine's tests use the same cases)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.domain.input_cases import MALFORMED_INPUTS
from trainstack.execution_input import InvalidInputError, default_run_name, validate_execution_input
from trainstack.input_rules import FIELDS, INPUT_RULES, PROFILE_RULES, QUEUE_FIELDS
from trainstack.job_request import RunRequest


@pytest.mark.parametrize(
    ("data", "cause"), [case[1:] for case in MALFORMED_INPUTS], ids=[case[0] for case in MALFORMED_INPUTS]
)
def test_malformed_input_fails_with_one_sentence_naming_the_field(settings, data, cause):
    with pytest.raises(InvalidInputError) as raised:
        validate_execution_input(data, settings)
    message = str(raised.value)
    assert message.startswith(cause)
    assert message.endswith(".") and "\n" not in message


def test_every_field_is_optional(settings):
    run = validate_execution_input({}, settings, execution_name="0b6f7c1e-1f2a")
    assert run == RunRequest(profile="llama-7b-smp", run_name="trainstack-0b6f7c1e-1f2a")


def test_complete_input(settings):
    data = {
        "profile": "llama-1b-smddp",
        "runName": "trainstack-llama1b-2026-11",
        "hyperparameters": {"learning_rate": "1e-4"},
        "instanceCount": 4,
        "maxRuntimeHours": 1.5,
        "resumeFrom": "s3://trainstack-checkpoints/trainstack-llama1b-2026-10/",
    }
    assert validate_execution_input(data, settings) == RunRequest(
        profile="llama-1b-smddp",
        run_name="trainstack-llama1b-2026-11",
        hyperparameters={"learning_rate": "1e-4"},
        instance_count=4,
        max_runtime_hours=1.5,
        resume_from="s3://trainstack-checkpoints/trainstack-llama1b-2026-10/",
    )


def test_default_run_name_without_execution_name_is_a_valid_timestamped_name(settings):
    moment = datetime(2026, 11, 29, 15, 4, 5, tzinfo=UTC)
    assert default_run_name(settings, "nccl-test", moment) == "trainstack-nccl-test-20261129-150405"
    run = validate_execution_input({"profile": "nccl-test"}, settings)
    assert run.run_name.startswith("trainstack-nccl-test-")


def test_default_run_name_from_an_invalid_execution_name_is_rejected(settings):
    with pytest.raises(InvalidInputError, match="runName may hold only"):
        validate_execution_input({}, settings, execution_name="nightly_run")


def test_rules_are_data_over_the_contract_fields():
    assert {rule.field for rule in INPUT_RULES} - {""} == set(FIELDS) | set(QUEUE_FIELDS)
    assert {rule.field for rule in PROFILE_RULES} <= set(FIELDS)
    assert len({(rule.field, rule.rule) for rule in INPUT_RULES}) == len(INPUT_RULES)


def test_no_profiles_configured(make_settings):
    # The config model rejects an empty profile list; the input rule stays as a second line of defence.
    with pytest.raises(InvalidInputError, match="no profiles are configured"):
        validate_execution_input({}, make_settings().model_copy(update={"profiles": []}))


def test_instance_count_must_fit_the_profile(make_settings):
    sharded = {
        "name": "sharded",
        "strategy": "smp",
        "smp": {"hybrid_shard_degree": 16},
        "instance_preferences": [{"instance_type": "ml.p5.48xlarge", "instance_count": 2}],
    }
    settings = make_settings({"profiles": [sharded]})
    with pytest.raises(InvalidInputError) as raised:
        validate_execution_input({"instanceCount": 1}, settings)
    assert str(raised.value) == (
        "instanceCount 1 does not fit profile sharded: smp.hybrid_shard_degree (16) must divide "
        "the world size of every preferred type; instance_preferences.0 (ml.p5.48xlarge) has 8 GPUs (8 x 1)."
    )
    assert validate_execution_input({"instanceCount": 4}, settings).instance_count == 4
