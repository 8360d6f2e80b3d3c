"""Queue mode in the synthesized templates: the three Batch resources, least-privilege IAM, lint clean.

Without queue mode nothing changes: the default config's snapshots (tests/infra, tests/pipeline) are the
proof of byte-identical templates; here the default app is also checked for the absence of Batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stacks.pipeline.queue.training_queue import TRAINING_QUEUE_ARN_OUTPUT
from tests.conftest import synthesize
from tests.infra.templates import only, resources
from tests.infra.test_app_quality import LINT_PLUGINS, run_cfn_lint, validation_report
from tests.pipeline.test_monitoring import assert_alarms
from tests.queue.test_queue_config import QUEUE, settings_with
from trainstack.profiles import MAX_PRIORITY
from trainstack.queue_settings import queue_job_prefix
from trainstack.run_names import RUN_NAME_MAX_LENGTH

BATCH_TYPES = ("AWS::Batch::ServiceEnvironment", "AWS::Batch::JobQueue", "AWS::Batch::SchedulingPolicy")


@pytest.fixture(scope="module")
def queued_app(tmp_path_factory):
    settings = settings_with({"queue": QUEUE})
    outdir = tmp_path_factory.mktemp("queued.cdk.out")
    stacks, assembly = synthesize(settings, outdir)
    template = assembly.get_stack_by_name(stacks.pipeline.stack_name).template
    return template, outdir


def statements_of(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if any(role["Ref"].startswith(role_prefix) for role in policy["Properties"]["Roles"])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_service_environment_caps_the_instances(queued_app):
    template, _ = queued_app
    environment = only(template, "AWS::Batch::ServiceEnvironment")["Properties"]
    assert environment["ServiceEnvironmentType"] == "SAGEMAKER_TRAINING"
    assert environment["CapacityLimits"] == [{"CapacityUnit": "NUM_INSTANCES", "MaxCapacity": 4}]


def test_job_queue_uses_the_environment_the_policy_and_terminates_after_the_capacity_wait(queued_app):
    template, _ = queued_app
    queue = only(template, "AWS::Batch::JobQueue")["Properties"]
    environment_id = next(iter(resources(template, "AWS::Batch::ServiceEnvironment")))
    policy_id = next(iter(resources(template, "AWS::Batch::SchedulingPolicy")))
    assert queue["JobQueueType"] == "SAGEMAKER_TRAINING"
    assert queue["ServiceEnvironmentOrder"] == [
        {"Order": 1, "ServiceEnvironment": {"Fn::GetAtt": [environment_id, "ServiceEnvironmentArn"]}}
    ]
    assert queue["SchedulingPolicyArn"] == {"Fn::GetAtt": [policy_id, "Arn"]}
    assert {
        (action["Reason"], action["MaxTimeSeconds"], action["State"], action["Action"])
        for action in queue["JobStateTimeLimitActions"]
    } == {
        ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", 6 * 3600, "RUNNABLE", "TERMINATE"),
        ("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE", 600, "RUNNABLE", "TERMINATE"),
    }


def test_fair_share_weights_become_inverse_weight_factors(queued_app):
    template, _ = queued_app
    policy = only(template, "AWS::Batch::SchedulingPolicy")["Properties"]
    # Batch gives a share more capacity the lower its weightFactor: production (weight 3) gets 3x research.
    assert sorted(
        (share["ShareIdentifier"], share["WeightFactor"])
        for share in policy["FairsharePolicy"]["ShareDistribution"]
    ) == [("production", 0.3333), ("research", 1.0)]


def test_attempt_machine_may_submit_to_this_queue_only_and_follow_service_jobs(queued_app):
    template, _ = queued_app
    queue_id = next(iter(resources(template, "AWS::Batch::JobQueue")))
    attempt = statements_of(template, "TrainingAttemptStateMachineRole")
    by_action: dict[str, list] = {}
    denied: dict[str, list] = {}
    for statement in attempt:
        for action in _actions(statement):
            if action.startswith(("batch:", "sagemaker:")):
                found = denied if statement.get("Effect") == "Deny" else by_action
                found.setdefault(action.lower(), []).append(
                    (statement["Resource"], statement.get("Condition"))
                )
    service_jobs = "arn:aws:batch:us-east-1:111111111111:service-job/*"
    priority = {"batch:SchedulingPriority": str(MAX_PRIORITY)}
    assert by_action == {
        # SubmitServiceJob authorizes the queue and the new service job (both required resource types), with
        # the queue's shares (a key of the service job) and the priority's bound (a key of the action).
        "batch:submitservicejob": [
            ({"Fn::GetAtt": [queue_id, "JobQueueArn"]}, {"NumericLessThanEqualsIfExists": priority}),
            (
                service_jobs,
                {
                    "NumericLessThanEqualsIfExists": priority,
                    "StringEquals": {"batch:ShareIdentifier": list(QUEUE["shares"])},
                    "Null": {"batch:ShareIdentifier": "false"},
                },
            ),
        ],
        "batch:tagresource": [(service_jobs, None)],
        # DescribeServiceJob supports no resource types.
        "batch:describeservicejob": [("*", None)],
        "batch:terminateservicejob": [(service_jobs, None)],
        # The attempt reads the training job Batch started (AWSBatch<jobName><attemptId>, this project's by
        # the queue key every jobName we submit starts with); it creates none itself.
        "sagemaker:describetrainingjob": [
            ("arn:aws:sagemaker:us-east-1:111111111111:training-job/trainstack-*", None),
            (BATCH_JOBS, None),
        ],
    }
    # Another namespace's service jobs stay out of reach (a job untagged, from before 0.5.0, does not).
    namespace_tag = "aws:ResourceTag/trainstack:namespace"
    assert denied == {
        "batch:terminateservicejob": [
            (
                service_jobs,
                {"StringNotEquals": {namespace_tag: "trainstack"}, "Null": {namespace_tag: "false"}},
            )
        ]
    }
    pipeline = statements_of(template, "TrainingStateMachineRole")
    assert not [
        action for statement in pipeline for action in _actions(statement) if action.startswith("batch:")
    ]
    (pass_role,) = [s for s in attempt if "iam:PassRole" in _actions(s)]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert template["Outputs"][TRAINING_QUEUE_ARN_OUTPUT]["Value"] == {
        "Fn::GetAtt": [queue_id, "JobQueueArn"]
    }


QUEUE_KEY = queue_job_prefix("trainstack-training")
# Both casings: which one IAM authorizes is unsourced (docs/iam.md).
BATCH_JOBS = [
    f"arn:aws:sagemaker:us-east-1:111111111111:training-job/{prefix}{QUEUE_KEY}*"
    for prefix in ("AWSBatch", "awsbatch")
]


def test_the_job_sweeper_may_stop_and_the_training_role_may_log_as_batchs_jobs(queued_app):
    template, _ = queued_app
    sweeper = statements_of(template, "JobCleanupSweeperRole")
    stops = [
        (s["Resource"], s.get("Condition")) for s in sweeper if "sagemaker:StopTrainingJob" in _actions(s)
    ]
    assert (BATCH_JOBS, None) in stops
    role = statements_of(template, "SageMakerExecutionRole")
    [streams] = [s for s in role if s.get("Sid") == "TrainingLogStreams"]
    group = "arn:aws:logs:us-east-1:111111111111:log-group:/aws/sagemaker/TrainingJobs"
    assert sorted(streams["Resource"]) == [
        f"{group}:log-stream:AWSBatch{QUEUE_KEY}*",
        f"{group}:log-stream:trainstack-*",
    ]


def test_queued_templates_pass_cfn_lint_and_nag(queued_app):
    _, outdir = queued_app
    result = run_cfn_lint(sorted(Path(outdir).glob("*.template.json")))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    for plugin in validation_report(Path(outdir))["pluginReports"]:
        if plugin["pluginName"] in LINT_PLUGINS:
            assert plugin["violations"] == [], plugin["pluginName"]
        for suppressed in plugin.get("suppressedViolations", []):
            assert suppressed["reason"].strip(), suppressed["ruleName"]


def test_alarms_also_watch_the_queue_cleanup_and_its_sweeper(queued_app):
    template, _ = queued_app
    assert_alarms(
        template,
        cleanup_machines=[
            "trainstack-job-cleanup",
            "trainstack-job-sweeper",
            "trainstack-queue-cleanup",
            "trainstack-queue-sweeper",
        ],
        sweepers=["trainstack-job-sweeper", "trainstack-queue-sweeper"],
    )


def test_a_fifo_queue_has_no_scheduling_policy():
    import aws_cdk as cdk

    from stacks.pipeline.queue.training_queue import TrainingQueue

    stack = cdk.Stack(cdk.App(), "Probe", env=cdk.Environment(account="111111111111", region="us-east-1"))
    TrainingQueue(
        stack, "Queue", project="trainstack", queue=settings_with({"queue": {**QUEUE, "shares": {}}}).queue
    )
    template = cdk.assertions.Template.from_stack(stack).to_json()
    assert not resources(template, "AWS::Batch::SchedulingPolicy")
    assert "SchedulingPolicyArn" not in only(template, "AWS::Batch::JobQueue")["Properties"]


def test_without_queue_mode_there_is_no_batch_resource(default_app):
    _, stacks, assembly = default_app
    template = assembly.get_stack_by_name(stacks.pipeline.stack_name).template
    assert not [body for body in template["Resources"].values() if body["Type"] in BATCH_TYPES]
    assert "batch:" not in json.dumps(template)


def _actions(statement: dict[str, Any]) -> list[str]:
    value = statement["Action"]
    return value if isinstance(value, list) else [value]


def _definition(template: dict[str, Any], logical_prefix: str) -> dict[str, Any]:
    """The state machine's definition, its partition references read as `aws`."""
    (machine,) = (
        resource
        for logical_id, resource in resources(template, "AWS::StepFunctions::StateMachine").items()
        if logical_id.startswith(logical_prefix)
    )
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(part if isinstance(part, str) else "aws" for part in parts))


def _retry(state: dict[str, Any]) -> tuple[list[str], int, int]:
    (retry,) = state["Retry"]
    return retry["ErrorEquals"], retry["MaxAttempts"], retry["MaxDelaySeconds"]


def test_each_call_retries_by_its_purpose_and_names_the_errors_it_can_raise(queued_app):
    """Issue 25's fixes of drifted copies: a status call in a poll loop retries like the direct attempt's
    (5 tries, 60 s apart at most), a call nothing asks again like the cleanups' (8 tries), and a
    Step Functions call retries Step Functions' error, not Batch's; the job cleanup walks run names up to
    the input check's limit."""
    template, _ = queued_app
    batch_errors = ["Batch.ServerException", "Batch.BatchException"]
    attempt = _definition(template, "TrainingAttemptStateMachine")["States"]
    assert _retry(attempt["SubmitServiceJob"]) == (batch_errors, 8, 60)
    assert _retry(attempt["DescribeServiceJob"]) == (batch_errors, 5, 60)
    assert _retry(attempt["TerminateOverdueServiceJob"]) == (batch_errors, 5, 60)
    assert _retry(attempt["TerminateOverBudgetServiceJob"]) == (batch_errors, 5, 60)
    assert _retry(attempt["DescribeTrainingJob"]) == (["SageMaker.SageMakerException"], 5, 60)
    sweeper = _definition(template, "QueueCleanupSweeper")
    (each,) = (state for name, state in sweeper["States"].items() if name.startswith("Each"))
    assert _retry(each["ItemProcessor"]["States"]["ReadOwnerExecution"]) == (["Sfn.SfnException"], 8, 60)
    could_jobs_exist = _definition(template, "JobCleanupStateMachine")["States"]["CouldJobsExist"]
    assert f"$length($runName) <= {RUN_NAME_MAX_LENGTH} " in could_jobs_exist["Choices"][0]["Condition"]
