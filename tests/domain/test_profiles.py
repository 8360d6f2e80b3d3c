"""Profile validation as a user meets it: `trainstack check-config`/synth errors naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import NO_ENV, default_config_data
from trainstack.cli import main
from trainstack.config_loading import ConfigError, parse_settings
from trainstack.planning.setups import instance_count_problem
from trainstack.profiles import Profile
from trainstack.retry_policies import RetryPolicy

P5 = {"instance_type": "ml.p5.48xlarge", "instance_count": 2}
P4DE = {"instance_type": "ml.p4de.24xlarge", "instance_count": 2}


def profile(**fields: Any) -> dict[str, Any]:
    return {"name": "test", "strategy": "torchrun", "instance_preferences": [P5], **fields}


def settings_with(*profiles: dict[str, Any]):
    return parse_settings({**default_config_data(), "profiles": list(profiles)}, NO_ENV, source="my.yaml")


def error_for(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        settings_with(data)
    message = str(raised.value)
    assert message.startswith("my.yaml: profiles.0") and message.endswith(".") and "\n" not in message
    return message


def test_default_profiles_are_valid_and_cover_every_strategy():
    settings = parse_settings(default_config_data(), NO_ENV)
    assert {p.strategy for p in settings.profiles} == {"smp", "smddp", "torchrun", "mpi"}
    nccl = settings.profile("nccl-test")
    assert (nccl.entry_point, nccl.instance_preferences[0].instance_count) == ("nccl_test.sh", 2)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"strategy": "smp", "smp": {"tensor_parallel_degree": 2}},
            "profiles.0.smp: smp.tensor_parallel_degree must be 1 (got 2): train.py does not yet clip "
            "gradients with SMP's clip_grad_norm_ or save checkpoints per tensor-parallel rank as AWS's "
            "SMP v2 examples do",
        ),
        (
            {"strategy": "smp", "smp": {"context_parallel_degree": 2}},
            "smp.context_parallel_degree must be 1 (got 2)",
        ),
        (
            {"strategy": "smp", "smp": {"sm_activation_offloading": True}},
            "smp.sm_activation_offloading must be false: train.py does not wrap the model in torch's "
            "offload_wrapper as AWS's SMP v2 example does",
        ),
        (
            {"strategy": "smp", "smp": {"hybrid_shard_degree": 32}},
            "smp.hybrid_shard_degree (32) must divide the world size of every preferred type; "
            "instance_preferences.0 (ml.p5.48xlarge) has 16 GPUs (8 x 2).",
        ),
        (
            {"strategy": "smddp"},
            "instance_preferences.0 (ml.p5.48xlarge): strategy smddp runs only on ml.p4d.24xlarge, "
            "ml.p4de.24xlarge (AWS's SMDDP list less ml.p3dn.24xlarge, whose V100 GPUs cannot compute in "
            "bf16 as train.py does).",
        ),
        (
            {"strategy": "smddp", "instance_preferences": [{"instance_type": "ml.p3dn.24xlarge"}]},
            "instance_preferences.0 (ml.p3dn.24xlarge): strategy smddp runs only on ml.p4d.24xlarge",
        ),
        (
            {"instance_preferences": [{"instance_type": "ml.p3.16xlarge", "instance_count": 2}]},
            "instance_preferences.0 (ml.p3.16xlarge): 2 instances need EFA, which ml.p3.16xlarge lacks",
        ),
        (
            {"instance_preferences": [P5, P4DE], "managed_spot": True, "max_wait_hours": 48},
            "managed_spot allows exactly one instance_preferences entry (SageMaker's InstancePreferences "
            "excludes managed spot); this profile lists 2.",
        ),
        ({"managed_spot": True}, "managed_spot needs max_wait_hours"),
        ({"max_wait_hours": 30}, "max_wait_hours applies only with managed_spot: true"),
        (
            {"managed_spot": True, "max_wait_hours": 2, "max_runtime_hours": 4},
            "max_wait_hours (2) must be at least max_runtime_hours (4).",
        ),
        (
            {
                "managed_spot": True,
                "max_wait_hours": 48,
                "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/plan-1",
            },
            "training_plan_arn uses reserved capacity and cannot be combined with managed_spot.",
        ),
        (
            {
                "instance_preferences": [P5, P4DE],
                "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/plan-1",
            },
            "training_plan_arn at profile level is only for one instance type; with several, set "
            "training_plan_arn on the instance_preferences entry whose type the plan reserves.",
        ),
        (
            {
                "instance_preferences": [
                    {**P5, "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p"}
                ],
                "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p",
            },
            "training_plan_arn is set twice: keep the one on instance_preferences.0.",
        ),
        (
            {"instance_preferences": [{**P5, "training_plan_arn": "plan-1"}]},
            "a SageMaker training plan ARN",
        ),
        ({"smp": {"hybrid_shard_degree": 2}}, "smp parameters apply only to strategy smp"),
        (
            {"strategy": "smp", "instance_preferences": [{"instance_type": "ml.m5.xlarge"}]},
            "strategy smp needs GPU instances; ml.m5.xlarge has none.",
        ),
        (
            {
                "strategy": "mpi",
                "instance_preferences": [
                    {"instance_type": "ml.g5.48xlarge"},
                    {"instance_type": "ml.g5.12xlarge"},
                ],
            },
            "strategy mpi starts one process per GPU, fixed in the request, so every preferred type "
            "must have the same number of GPUs; these have 4, 8.",
        ),
        ({"instance_preferences": [P5, P5]}, "instance_preferences lists ml.p5.48xlarge more than once"),
        (
            {"instance_preferences": [P5] * 6},
            "profiles.0.instance_preferences: List should have at most 5 items",
        ),
        ({"instance_preferences": []}, "profiles.0.instance_preferences: List should have at least 1 item"),
        (
            {"instance_preferences": [{"instance_type": "ml.p9.48xlarge"}]},
            "profiles.0.instance_preferences.0.instance_type: unknown instance type 'ml.p9.48xlarge'; "
            "known types: ml.c5.4xlarge,",
        ),
        (
            {"strategy": "horovod"},
            "profiles.0.strategy: Input should be 'smp', 'smddp', 'torchrun' or 'mpi'.",
        ),
        (
            {"hyperparameters": {"sagemaker_program": "x.py"}},
            "profiles.0.hyperparameters: sagemaker_program is set from the profile's strategy and "
            "entry_point",
        ),
        ({"environment": {"TRAINSTACK_EXPECTED_GPUS": "8"}}, "TRAINSTACK_EXPECTED_GPUS is set by trainstack"),
        ({"environment": {"PET_MAX_RESTARTS": "3"}}, "PET_MAX_RESTARTS is set by trainstack"),
        (
            {
                "strategy": "smddp",
                "instance_preferences": [{"instance_type": "ml.p4d.24xlarge"}],
                "in_job_restarts": {"max_restarts": 1},
            },
            "in_job_restarts applies to strategies torchrun and smp (torchrun restarts the workers); "
            "strategy smddp runs under mpirun, which cannot restart its ranks: remove it",
        ),
        (
            {"in_job_restarts": {"max_restarts": 11}},
            "profiles.0.in_job_restarts.max_restarts: Input should be less than or equal to 10.",
        ),
        (
            {"retry": {"initial_backoff_seconds": 600, "max_backoff_seconds": 60}},
            "profiles.0.retry: retry.max_backoff_seconds (60) must be at least "
            "retry.initial_backoff_seconds (600).",
        ),
        (
            {"fault_retries": {"initial_backoff_seconds": 900}},
            "profiles.0.fault_retries: fault_retries.max_backoff_seconds (600) must be at least "
            "fault_retries.initial_backoff_seconds (900).",
        ),
        (
            {"fault_retries": {"max_retries": 21}},
            "profiles.0.fault_retries.max_retries: Input should be less than or equal to 20.",
        ),
        (
            {"fault_retries": {"max_deadline_share": 1.5}},
            "profiles.0.fault_retries.max_deadline_share: Input should be less than or equal to 1.",
        ),
        (
            {"retry": {"max_attempts": 1000}},
            "profiles.0.retry.max_attempts: Input should be less than or equal to 999.",
        ),
        (
            {"schedule": "every day"},
            "profiles.0.schedule: 'every day' is not an EventBridge Scheduler expression",
        ),
        (
            {"keep_alive_seconds": 30000},
            "profiles.0.keep_alive_seconds: Input should be less than or equal to 21600.",
        ),
        (
            {"max_runtime_hours": 700},
            "profiles.0.max_runtime_hours: Input should be less than or equal to 672.",
        ),
        (
            {"entry_point": "../train"},
            "profiles.0.entry_point: '../train' is not a relative path to a .py or .sh file",
        ),
        ({"smp_parameters": {}}, "profiles.0.smp_parameters: unknown key; allowed keys here: "),
        (
            {"slow_host": {"intervals": 0}},
            "profiles.0.slow_host.intervals: Input should be greater than or equal to 1.",
        ),
        (
            {"strategy": "mpi", "entry_point": "nccl_test.sh", "slow_host": {"end_attempt": True}},
            "slow_host applies to train.py's strategies (smp, smddp, torchrun), not to strategy mpi",
        ),
    ],
)
def test_rule_violations_name_the_field_in_one_sentence(fields, expected):
    assert expected in error_for(profile(**fields))


def test_yaml_numbers_and_booleans_become_hyperparameter_strings():
    settings = settings_with(profile(hyperparameters={"max_steps": 100, "lr": 3e-4, "compile": True}))
    assert settings.profiles[0].hyperparameters == {"max_steps": "100", "lr": "0.0003", "compile": "true"}


def test_accepted_schedules():
    for expression in ("rate(7 days)", "cron(0 3 ? * MON *)", "at(2027-01-01T00:00:00)"):
        assert settings_with(profile(schedule=expression)).profiles[0].schedule == expression


def test_backoff_schedule_grows_by_the_multiplier_and_stops_at_the_cap():
    policy = RetryPolicy(
        max_attempts=7, initial_backoff_seconds=300, backoff_multiplier=2, max_backoff_seconds=3600
    )
    assert policy.backoff_schedule() == [300, 600, 1200, 2400, 3600, 3600]
    assert RetryPolicy(max_attempts=1).backoff_schedule() == []


def test_instance_count_problem_rechecks_placement_rules_at_another_count():
    smp = Profile.model_validate(profile(strategy="smp", smp={"hybrid_shard_degree": 16}))
    assert instance_count_problem(smp, 4) is None
    assert "smp.hybrid_shard_degree (16) must divide the world size" in instance_count_problem(smp, 1)
    single = Profile.model_validate(profile(instance_preferences=[{"instance_type": "ml.p3.16xlarge"}]))
    assert "need EFA" in instance_count_problem(single, 2)


def test_check_config_command_prints_the_profile_error(tmp_path, capsys):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**default_config_data(), "profiles": [profile(strategy="smddp")]}))
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"trainstack: {path}: profiles.0: instance_preferences.0 (ml.p5.48xlarge): strategy smddp"
    )
