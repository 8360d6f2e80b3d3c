"""No job outlives its execution: the synthesized cleanup and sweeper machines in the emulator."""

from __future__ import annotations

import json

import boto3

from localaws.emulator.errors import aws_sdk_error_name
from localaws.sagemaker import COMPLETED, TRAINING
from stacks.pipeline.monitoring import STOPPED_ORPHAN_PATTERNS
from tests.cleanup.conftest import World, stand_in_pipeline
from tests.infra.templates import resources
from tests.pipeline import harness
from tests.pipeline.metric_filter import published

IN_FLIGHT_CREATE_SECONDS = 120


def in_progress(world: World, name: str) -> bool:
    return world.fake.jobs[name].current().status == "InProgress"


def test_abort_during_create_stops_the_job_that_lands_after_the_abort(world):
    world.fake.create_latency = 30  # the job appears 30 s after the call
    # The call was already on its way when the execution was stopped: SageMaker creates the job.
    arn = world.stop_during("CreateTrainingJob", "aborted-in-create", {"runName": "trainstack-in-create"})
    assert harness.wait_for(arn).status == "ABORTED"
    harness.wait_until(lambda: "trainstack-in-create-1" in world.fake.jobs)
    assert not world.fake.visible("trainstack-in-create-1")

    cleanup = world.clean_up_after(arn)

    assert cleanup.status == "SUCCEEDED", cleanup.cause
    assert cleanup.output == {"stopped": ["trainstack-in-create-1"]}
    assert world.fake.stop_requests == ["trainstack-in-create-1"]
    assert world.clock.waits[-1:] == [IN_FLIGHT_CREATE_SECONDS]


def test_abort_during_polling_stops_the_running_job(world):
    arn = world.stop_during("ListTrainingJobs", "aborted-in-poll")
    assert harness.wait_for(arn).status == "ABORTED"

    cleanup = world.clean_up_after(arn)

    # No runName in the input: the pipeline named the run trainstack-<execution name>.
    assert cleanup.output == {"stopped": ["trainstack-aborted-in-poll-1"]}
    assert not in_progress(world, "trainstack-aborted-in-poll-1")
    # History of a cleanup that stops the only job (docs/pipeline.md quotes these figures).
    assert len(cleanup.history) == 41


def test_timed_out_execution_has_its_job_stopped(world):
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    client.update_state_machine(
        stateMachineArn=world.pipeline_arn, definition=json.dumps(stand_in_pipeline(timeout_seconds=3600))
    )
    arn = world.start_pipeline("timed-out", {"runName": "trainstack-slow"})
    assert harness.wait_for(arn).status == "TIMED_OUT"
    assert in_progress(world, "trainstack-slow-1")

    cleanup = world.clean_up_after(arn)

    assert cleanup.output == {"stopped": ["trainstack-slow-1"]}
    assert world.fake.stop_requests == ["trainstack-slow-1"]


def test_cleanup_walks_every_attempt_and_stops_only_jobs_still_in_progress(world):
    # Attempts 1 and 2 ended (capacity), attempt 3 runs: the cleanup describes 1..4 and stops 3.
    world.fake.control.hold("ListTrainingJobs")
    arn = world.start_pipeline("three-attempts", {"runName": "trainstack-retried"})
    harness.wait_until(lambda: world.fake.control.waiting["ListTrainingJobs"])
    for attempt, phase in ((2, COMPLETED), (3, TRAINING)):
        world.fake.behaviour.script([[phase]])
        world.fake.create(
            {
                **world.fake.jobs["trainstack-retried-1"].request,
                "TrainingJobName": f"trainstack-retried-{attempt}",
            }
        )
    world.fake.jobs["trainstack-retried-1"].stop_requested = True
    world.stop_pipeline(arn)
    world.fake.control.release_gate("ListTrainingJobs")
    world.fake.stop_requests.clear()

    cleanup = world.clean_up_after(arn)

    assert cleanup.output == {"stopped": ["trainstack-retried-3"]}
    assert world.fake.stop_requests == ["trainstack-retried-3"]
    assert world.fake.control.calls["DescribeTrainingJob"] == 4
    assert len(cleanup.history) == 41 + 2 * 9  # an attempt that is not running: describe, choice, next


def test_cleanup_leaves_a_job_of_another_execution_with_the_same_run_name_alone(world):
    world.fake.control.hold("ListTrainingJobs")
    running = world.start_pipeline("first", {"runName": "trainstack-shared"})
    harness.wait_until(lambda: world.fake.control.waiting["ListTrainingJobs"])
    # A second execution with the same runName fails at create (ResourceInUse): nothing of its own runs.
    second = world.start_pipeline("second", {"runName": "trainstack-shared"})
    assert harness.wait_for(second).status == "FAILED"

    cleanup = world.clean_up_after(second)

    assert cleanup.output == {"stopped": []}
    assert world.fake.stop_requests == []
    assert world.status(running) == "RUNNING"


def test_cleanup_of_a_run_name_the_pipeline_rejects_asks_sagemaker_nothing(world):
    arn = harness.start(world.pipeline_arn, {"runName": "other-team-run"}, "bad-input")
    world.stop_pipeline(arn)
    cleanup = world.clean_up_after(arn)
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    assert world.fake.control.calls["DescribeTrainingJob"] == 0


def test_throttled_describe_tags_and_stop_are_retried_until_the_job_is_stopped(world):
    arn = world.stop_during("ListTrainingJobs", "throttled")
    world.fake.control.throttles.update({"DescribeTrainingJob": 3, "ListTags": 2, "StopTrainingJob": 2})

    cleanup = world.clean_up_after(arn)

    assert cleanup.status == "SUCCEEDED", cleanup.cause
    assert cleanup.output == {"stopped": ["trainstack-throttled-1"]}
    assert world.fake.control.throttled == {"DescribeTrainingJob": 3, "ListTags": 2, "StopTrainingJob": 2}
    # Describe throttling is read from the Cause and backed off (5 s doubling, up to +50 %).
    backoffs = world.clock.waits[-3:]
    assert [5 <= backoffs[0] <= 8, 10 <= backoffs[1] <= 15, 20 <= backoffs[2] <= 30] == [True] * 3
    assert len(world.clock.retry_sleeps) == 4


def test_describe_failing_for_another_reason_fails_the_cleanup_loudly(world):
    arn = world.stop_during("ListTrainingJobs", "denied")
    world.fake.missing_job_error = ("AccessDeniedException", "not authorized to perform DescribeTrainingJob")

    cleanup = world.clean_up_after(arn)

    assert (cleanup.status, cleanup.error) == ("FAILED", "CleanupFailed")
    assert world.fake.stop_requests == ["trainstack-denied-1"]
    assert cleanup.cause.startswith(
        "Could not tell whether training job trainstack-denied-2 exists: not authorized"
    )


def test_sweeper_stops_orphans_and_leaves_jobs_of_running_executions_alone(world):
    world.fake.control.hold("ListTrainingJobs")
    running = world.start_pipeline("still-running")
    orphaned = world.start_pipeline("orphaned")
    harness.wait_until(lambda: world.fake.control.waiting["ListTrainingJobs"] == 2)
    world.stop_pipeline(orphaned)
    # The stopped execution's status call returns (it ends ABORTED); the other one's stays in flight.
    world.fake.control.release_gate("ListTrainingJobs", caller="trainstack-orphaned")
    assert harness.wait_for(orphaned).status == "ABORTED"
    # A job of another pipeline's execution, one naming the ended execution but another namespace (another
    # team's pipeline, a copied tag), and one without the tags: not the sweeper's business.
    namespace = {"Key": "trainstack:namespace", "Value": "trainstack"}
    for name, tags in (
        (
            "trainstack-other-1",
            [
                {
                    "Key": "trainstack:execution",
                    "Value": running.replace(":trainstack-pipeline:", ":someone-elses-pipeline:"),
                },
                namespace,
            ],
        ),
        (
            "trainstack-copied-1",
            [
                {"Key": "trainstack:execution", "Value": orphaned},
                {**namespace, "Value": "trainstack-teamb"},
            ],
        ),
        ("trainstack-untagged-1", []),
    ):
        world.fake.create(
            {**world.fake.jobs["trainstack-orphaned-1"].request, "TrainingJobName": name, "Tags": tags}
        )
    world.fake.control.throttles.update({"Search": 2, "StopTrainingJob": 1})

    sweep = world.sweep()

    assert sweep.status == "SUCCEEDED", sweep.cause
    assert sweep.output == {"stopped": ["trainstack-orphaned-1"]}
    # The sweeper's metric filter (alarm OrphanStopped) counts the one stop, retried after a throttle.
    assert published(STOPPED_ORPHAN_PATTERNS["job-sweeper"], sweep.log_messages()) == 1
    assert world.fake.stop_requests == ["trainstack-orphaned-1"]
    assert in_progress(world, "trainstack-still-running-1")
    assert world.status(running) == "RUNNING"
    assert world.fake.control.throttled == {"Search": 2, "StopTrainingJob": 1}


def test_cleanup_catches_only_names_aws_produces(definitions):
    names = {
        name
        for definition in (definitions.cleanup, definitions.sweeper)
        for name in _error_names(json.loads(definition))
    }
    assert names == {
        aws_sdk_error_name("SageMaker", "sagemaker", "ThrottlingException"),
        aws_sdk_error_name("SageMaker", "sagemaker", "ResourceNotFound"),
        aws_sdk_error_name("Sfn", "stepfunctions", "ThrottlingException"),
        aws_sdk_error_name("Sfn", "stepfunctions", "ExecutionDoesNotExist"),
    }


def _error_names(node) -> set[str]:
    if isinstance(node, dict):
        found = set(node.get("ErrorEquals", []))
        for value in node.values():
            found |= _error_names(value)
        return found
    if isinstance(node, list):
        return set().union(*(_error_names(item) for item in node)) if node else set()
    return set()


def test_sweeper_runs_every_15_minutes_with_least_privilege(definitions):
    template = definitions.template
    machines = {
        body["Properties"]["StateMachineName"]: name
        for name, body in resources(template, "AWS::StepFunctions::StateMachine").items()
    }
    schedules = [
        body
        for body in resources(template, "AWS::Events::Rule").values()
        if "ScheduleExpression" in body["Properties"]
    ]
    assert [rule["Properties"]["ScheduleExpression"] for rule in schedules] == ["rate(15 minutes)"]
    assert schedules[0]["Properties"]["Targets"][0]["Arn"] == {"Ref": machines["trainstack-job-sweeper"]}
    role = template["Resources"][machines["trainstack-job-sweeper"]]["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    policy = next(
        body["Properties"]["PolicyDocument"]
        for body in resources(template, "AWS::IAM::Policy").values()
        if body["Properties"]["Roles"] == [{"Ref": role}]
    )
    actions = {
        action: json.dumps(statement["Resource"])
        for statement in policy["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
        if not action.startswith(("logs:", "xray:"))  # log delivery and tracing (CDK's)
    }
    assert set(actions) == {"sagemaker:Search", "states:DescribeExecution", "sagemaker:StopTrainingJob"}
    assert actions["sagemaker:StopTrainingJob"].endswith(':training-job/trainstack-*"')
    assert ":execution:trainstack-pipeline:*" in actions["states:DescribeExecution"]


def test_cleanup_definitions_are_valid_for_aws_tools(definitions):
    from tests.pipeline.test_pipeline_template import aws_validation

    clean = {"aslValidator": [], "languageService": []}
    assert aws_validation([definitions.cleanup, definitions.sweeper]) == [clean, clean]
