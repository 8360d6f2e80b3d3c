"""Queue mode's cleanup states in the local emulator: an ended execution's waiting service jobs leave the
queue, other runs' jobs stay; the sweeper terminates waiting jobs whose execution is no longer running."""

from __future__ import annotations

import json

import boto3

from localaws.sagemaker import STARTING, TRAINING
from stacks.pipeline.monitoring import STOPPED_ORPHAN_PATTERNS
from tests.pipeline.harness import wait_for
from tests.pipeline.metric_filter import published
from tests.queue.conftest import (
    ACCOUNT,
    QUEUE_ARN,
    QUEUE_NAME,
    REGION,
    SERVICE_JOB_ARN,
    create_machine,
    definition_of,
    service_job,
)
from tests.queue.test_fake_batch import payload

PIPELINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:trainstack-pipeline"
EXECUTION_PREFIX = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:trainstack-pipeline:"
NAMESPACE = "trainstack"  # the pipeline's project


def cleanup_definition() -> str:
    from aws_cdk import aws_stepfunctions as sfn

    from stacks.pipeline.cleanup.queue_cleanup import terminate_run_service_jobs

    def build(stack):
        start = sfn.Pass.jsonata(
            stack,
            "ReadRun",
            assign={
                "runName": "{% $states.input.runName %}",
                "executionArn": "{% $states.input.executionArn %}",
            },
        )
        first = terminate_run_service_jobs(
            stack,
            job_queue_arn=QUEUE_ARN,
            queue_name=QUEUE_NAME,
            service_job_arn=SERVICE_JOB_ARN,
            run_name="$runName",
            execution_arn="$executionArn",
            done=sfn.Succeed.jsonata(stack, "Done"),
        )
        return start.next(first)

    return definition_of(build)


def sweeper_definition() -> str:
    from aws_cdk import aws_stepfunctions as sfn

    from stacks.pipeline.cleanup.queue_cleanup import terminate_orphaned_service_jobs

    def build(stack):
        return terminate_orphaned_service_jobs(
            stack,
            job_queue_arn=QUEUE_ARN,
            service_job_arn=SERVICE_JOB_ARN,
            namespace=NAMESPACE,
            execution_prefix=EXECUTION_PREFIX,
            executions_arn=f"{EXECUTION_PREFIX}*",
            done=sfn.Succeed.jsonata(stack, "Done"),
        )

    return definition_of(build)


def submit(name: str, execution: str | None, namespace: str | None = NAMESPACE) -> str:
    """Submit service job `name` tagged with `execution` and `namespace` (untagged: None), as a pipeline
    would."""
    tags = {"trainstack:execution": execution, "trainstack:namespace": namespace}
    tags = {key: value for key, value in tags.items() if value is not None}
    return boto3.client("batch").submit_service_job(
        jobName=name,
        jobQueue="trainstack-training",
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=payload(name),
        **({"tags": tags} if tags else {}),
    )["jobId"]


def test_cleanup_terminates_the_ended_runs_jobs_and_leaves_other_runs_alone(queue_world):
    client, batch, sagemaker, _ = queue_world
    batch.page_size = 1  # every job on a page of its own: the cleanup must follow nextToken
    sagemaker.behaviour.script([[STARTING, TRAINING]])  # every job runs until stopped
    # started: takes the 2 instances
    running = submit(service_job("trainstack-a-1"), f"{EXECUTION_PREFIX}trainstack-a")
    waiting = submit(service_job("trainstack-a-2"), f"{EXECUTION_PREFIX}trainstack-a")
    other = submit(service_job("trainstack-a-b-1"), f"{EXECUTION_PREFIX}trainstack-a-b")
    arn = create_machine(client, "cleanup", cleanup_definition())
    execution = client.start_execution(
        stateMachineArn=arn,
        input=json.dumps({"runName": "trainstack-a", "executionArn": f"{EXECUTION_PREFIX}trainstack-a"}),
    )["executionArn"]
    assert wait_for(execution).status == "SUCCEEDED"
    status = {job_id: batch.jobs[job_id] for job_id in (running, waiting, other)}
    assert (status[running].status, status[running].terminated) == ("FAILED", True)
    assert (status[waiting].status, status[waiting].terminated) == ("FAILED", True)
    # The other run's job stays in the queue (and starts on the freed instances).
    assert not status[other].terminated and status[other].status == "SCHEDULED"
    # Batch stopped the started job's training job.
    assert batch.training_jobs_of(service_job("trainstack-a-1"))[0] in sagemaker.stop_requests
    pages = [call for operation, call in batch.calls if operation == "ListServiceJobs"]
    # The name filter leaves the other run's job out: one page per job of this run.
    assert len(pages) == 2 and pages[0].get("nextToken") is None


def test_sweeper_terminates_waiting_jobs_of_executions_that_ended(queue_world):
    client, batch, sagemaker, _ = queue_world
    batch.page_size = 2  # three pages of waiting jobs
    sagemaker.behaviour.script([[STARTING, TRAINING]])
    # A task token nobody returns keeps "alive" RUNNING whatever the (virtual) clock does; "gone" ends at
    # once. (Not a stop of a held execution: moto does not always end an execution stopped while it waits
    # for a task token, and the test then hangs.)
    queue_url = boto3.client("sqs").create_queue(QueueName="hold")["QueueUrl"]
    hold = {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
        "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
        "End": True,
    }
    choose = {
        "Type": "Choice",
        "Choices": [{"Variable": "$.hold", "BooleanEquals": True, "Next": "Hold"}],
        "Default": "Ended",
    }
    definition = {
        "StartAt": "Choose",
        "States": {"Choose": choose, "Hold": hold, "Ended": {"Type": "Succeed"}},
    }
    pipeline = create_machine(client, "trainstack-pipeline", json.dumps(definition))
    alive = client.start_execution(stateMachineArn=pipeline, name="alive", input='{"hold": true}')[
        "executionArn"
    ]
    gone = client.start_execution(stateMachineArn=pipeline, name="gone", input='{"hold": false}')[
        "executionArn"
    ]
    assert wait_for(gone).status == "SUCCEEDED"
    submit(service_job("trainstack-blocker-1"), alive)
    orphan = submit(service_job("trainstack-gone-1"), gone)
    kept = submit(service_job("trainstack-alive-1"), alive)
    foreign = submit("other-pipeline-1", f"arn:aws:states:{REGION}:{ACCOUNT}:execution:other:gone")
    # A job submitted by hand, without the tag: its $lookup is undefined, which AWS fails the state for
    # unless the expression guards it (States.QueryEvaluationError).
    untagged = submit("by-hand-1", None)
    late_orphan = submit(service_job("trainstack-gone-2"), gone)
    arn = create_machine(client, "sweeper", sweeper_definition())
    sweep = wait_for(client.start_execution(stateMachineArn=arn)["executionArn"])
    assert sweep.status == "SUCCEEDED"
    assert batch.jobs[orphan].terminated
    # The sweeper's metric filter (alarm OrphanStopped) counts the two jobs it terminated, one per page.
    assert published(STOPPED_ORPHAN_PATTERNS["queue-sweeper"], sweep.log_messages()) == 2
    ended = client.describe_execution(executionArn=gone)["status"]
    assert ended != "RUNNING"
    assert batch.jobs[orphan].status_reason == f"trainstack sweeper: execution {gone} is {ended}"
    assert batch.jobs[late_orphan].terminated  # on the last page
    assert [batch.jobs[job].status for job in (kept, foreign, untagged)] == ["RUNNABLE"] * 3
    assert len([operation for operation, _ in batch.calls if operation == "ListServiceJobs"]) == 3


def test_sweeper_leaves_waiting_jobs_of_another_namespace_alone(queue_world):
    """A waiting job whose execution tag names an ended execution of this pipeline is still left alone unless
    its namespace tag is this pipeline's project: another team's pipeline, or a copied tag."""
    client, batch, sagemaker, _ = queue_world
    sagemaker.behaviour.script([[STARTING, TRAINING]])
    pipeline = create_machine(
        client, "trainstack-pipeline", json.dumps({"StartAt": "End", "States": {"End": {"Type": "Succeed"}}})
    )
    gone = client.start_execution(stateMachineArn=pipeline, name="gone")["executionArn"]
    assert wait_for(gone).status == "SUCCEEDED"
    submit("by-hand-1", None)  # started: takes the 2 instances, so the jobs below wait
    ours = submit(service_job("trainstack-gone-1"), gone)
    other_team = submit(service_job("trainstack-gone-2"), gone, namespace="trainstack-teamb")
    no_namespace = submit(service_job("trainstack-gone-3"), gone, namespace=None)
    arn = create_machine(client, "sweeper", sweeper_definition())
    assert wait_for(client.start_execution(stateMachineArn=arn)["executionArn"]).status == "SUCCEEDED"
    assert batch.jobs[ours].terminated
    assert [batch.jobs[job].status for job in (other_team, no_namespace)] == ["RUNNABLE"] * 2
