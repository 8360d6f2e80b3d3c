"""Queue mode in the config and in the execution input: defaults, one-sentence errors, the extra fields."""

from __future__ import annotations

import pytest

from tests.conftest import NO_ENV, deep_merge, default_config_data
from trainstack.config_loading import ConfigError, parse_settings
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.input_rules import FIELDS, input_fields

QUEUE = {
    "enabled": True,
    "max_instances": 4,
    "shares": {"research": 1, "production": 3},
    "capacity_wait_hours": 6,
}


def settings_with(overrides: dict):
    return parse_settings(deep_merge(default_config_data(), overrides), NO_ENV, source="my.yaml")


def config_error(overrides: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        settings_with(overrides)
    message = str(raised.value)
    assert message.startswith("my.yaml: ") and message.endswith(".") and "\n" not in message
    return message


def with_profile_field(index: int, **fields) -> list[dict]:
    profiles = default_config_data()["profiles"]
    profiles[index] = {**profiles[index], **fields}
    return profiles


def test_queue_mode_is_off_by_default_and_the_input_contract_is_unchanged():
    settings = settings_with({})
    assert settings.queue.enabled is False
    assert input_fields(settings) == FIELDS
    with pytest.raises(
        InvalidInputError, match=r"^The input has unknown field\(s\) priority; allowed fields"
    ):
        validate_execution_input({"priority": 5}, settings)


def test_queue_settings_are_read():
    queue = settings_with({"queue": QUEUE}).queue
    assert (queue.enabled, queue.max_instances, queue.capacity_wait_seconds) == (True, 4, 6 * 3600)
    assert queue.shares == {"research": 1, "production": 3}


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        (
            {"capacity_wait_hours": 48},
            "queue.capacity_wait_hours: 48 is outside AWS Batch's job state time limit",
        ),
        ({"capacity_wait_hours": 0.1}, "use 0.17 (10 minutes) to 24 hours"),
        ({"shares": {"team-a": 1}}, "share name 'team-a' may hold only letters and digits"),
        ({"shares": {"teamA": 0}}, "share 'teamA' has weight 0; weights are whole numbers from 1 to 1000"),
        ({"max_instances": 0}, "queue.max_instances: Input should be greater than or equal to 1"),
        ({"enable": True}, "queue.enable: unknown key; allowed keys here: capacity_wait_hours, enabled,"),
    ],
)
def test_bad_queue_settings_end_in_one_sentence_naming_the_field(queue, expected):
    assert expected in config_error({"queue": {**QUEUE, **queue}})


def test_a_profile_larger_than_the_queue_is_rejected_at_synth():
    message = config_error({"queue": {**QUEUE, "max_instances": 1}})
    assert "profile llama-7b-smp asks for 2 x ml.p5.48xlarge, more than queue.max_instances (1)" in message


def test_profile_priority_needs_a_fair_share_queue_and_a_range():
    assert "profiles.1.priority orders jobs only in a fair-share queue" in config_error(
        {"profiles": with_profile_field(1, priority=10)}
    )
    assert "profiles.1.priority: priority must be a whole number from 0 to 9999" in config_error(
        {"queue": QUEUE, "profiles": with_profile_field(1, priority=10_000)}
    )
    settings = settings_with({"queue": QUEUE, "profiles": with_profile_field(1, priority=10)})
    assert settings.profile("llama-1b-smddp").priority == 10


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        ({"priority": -1}, "priority must be a whole number from 0 to 9999 (higher runs first)."),
        ({"priority": "9"}, "priority must be a whole number from 0 to 9999 (higher runs first)."),
        ({"share": "marketing"}, "share must be one of the queue's shares: research, production."),
        (
            {"instanceCount": 5},
            "instanceCount must be at most 4, the queue's capacity (queue.max_instances).",
        ),
    ],
)
def test_bad_queue_input_is_invalid_input(data, cause):
    with pytest.raises(InvalidInputError) as raised:
        validate_execution_input(data, settings_with({"queue": QUEUE}))
    assert str(raised.value) == cause


def test_priority_without_fair_shares_is_invalid_input():
    settings = settings_with({"queue": {**QUEUE, "shares": {}}})
    with pytest.raises(InvalidInputError) as raised:
        validate_execution_input({"priority": 5}, settings)
    assert (
        str(raised.value)
        == "priority orders jobs only in a queue with fair shares (queue.shares in the config)."
    )


def test_priority_and_share_default_to_the_profile_and_the_first_share():
    settings = settings_with({"queue": QUEUE, "profiles": with_profile_field(1, priority=10)})
    run = validate_execution_input({"profile": "llama-1b-smddp"}, settings, execution_name="e1")
    assert (run.priority, run.share) == (10, "research")
    run = validate_execution_input(
        {"profile": "llama-1b-smddp", "priority": 900, "share": "production"}, settings, execution_name="e1"
    )
    assert (run.priority, run.share) == (900, "production")
