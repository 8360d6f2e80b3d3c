"""Queue mode end to end: the synthesized pipeline (input checks, attempt machine submitting to Batch)
in the local emulator against FakeBatch and FakeSageMaker.

Two queue configs: a first-in, first-out queue of 2 instances, and a fair-share queue of 3 instances
with shares teamA (weight 2) and teamB (weight 1) and a profile priority.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from localaws.demo.synthesized import create_tables
from localaws.emulator.batch_jobs import TRAINING_JOB_NAMES
from localaws.emulator.batch_routes import install_fake_batch
from localaws.emulator.fake_batch import FakeBatch
from localaws.sagemaker import (
    CAPACITY_FAILURE,
    COMPLETED,
    STARTING,
    TRAINING,
    FakeSageMaker,
    evaluated,
    scripted_sagemaker,
)
from stacks.pipeline.queue.training_queue import weight_factor
from tests.conftest import synthesize
from tests.pipeline import harness
from tests.pipeline.conftest import (
    deploy_registry_resources,
    filled_definition,
    state_machine_arn,
    state_machines,
)
from tests.pipeline.test_fault_drills import NCCL, USER_CONFIG
from tests.pipeline.test_quota_drills import P4DE, P5, busy, exceeded
from tests.pipeline.test_registry import versions
from tests.queue.conftest import QUEUE_NAME, service_job
from tests.queue.test_queue_config import settings_with
from trainstack.queue_settings import evaluation_job_key, service_job_name
from trainstack.registry import LINEAGE_KEYS

FIFO = {"enabled": True, "max_instances": 2, "capacity_wait_hours": 1}
FAIR = {"enabled": True, "max_instances": 3, "shares": {"teamA": 2, "teamB": 1}, "capacity_wait_hours": 1}
QUEUE_ARN = f"arn:aws:batch:{harness.REGION}:{harness.ACCOUNT}:job-queue/trainstack-training"


def queue_arn(part: dict[str, Any]) -> str | None:
    """The job queue's ARN where a definition references it (with teams, the queue stack's output)."""
    if ("Fn::GetAtt" in part and part["Fn::GetAtt"][1] == "JobQueueArn") or "Fn::GetStackOutput" in part:
        return QUEUE_ARN
    return None


def filled(properties: dict[str, Any], template: dict[str, Any]) -> str:
    return filled_definition(properties, template, other_references=queue_arn)


@dataclass(frozen=True)
class QueuedPipeline:
    settings: Any
    pipeline: str
    attempt: str
    queue_cleanup: str
    registration: str
    manifest: str  # the dataset manifest's child machine
    outdir: Path  # the synthesized cloud assembly
    template: dict[str, Any]  # the pipeline stack's


def queued_pipeline(
    queue: dict[str, Any], tmp_path_factory, profiles: list[dict] | None = None
) -> QueuedPipeline:
    overrides: dict[str, Any] = {"queue": queue}
    if profiles is not None:
        overrides["profiles"] = profiles
    settings = settings_with(overrides)
    outdir = tmp_path_factory.mktemp("queued.cdk.out")
    stacks, assembly = synthesize(settings, outdir)
    template = assembly.get_stack_by_name(stacks.pipeline.stack_name).template
    machines = state_machines(template)
    return QueuedPipeline(
        settings,
        filled(machines["trainstack-pipeline"], template),
        filled(machines["trainstack-pipeline-attempt"], template),
        filled(machines["trainstack-queue-cleanup"], template),
        filled(machines["trainstack-pipeline-registration"], template),
        filled(machines["trainstack-dataset-manifest"], template),
        outdir,
        template,
    )


@pytest.fixture(scope="module")
def fifo_pipeline(tmp_path_factory) -> QueuedPipeline:
    return queued_pipeline(FIFO, tmp_path_factory)


@pytest.fixture(scope="module")
def fair_pipeline(tmp_path_factory) -> QueuedPipeline:
    from tests.conftest import default_config_data

    profiles = default_config_data()["profiles"]
    profiles[0] = {**profiles[0], "priority": 10}
    return queued_pipeline(FAIR, tmp_path_factory, profiles)


@dataclass
class Queue:
    sagemaker: FakeSageMaker
    batch: FakeBatch
    pipeline_arn: str
    cleanup_arn: str

    def start(self, name: str, execution_input: dict[str, Any]) -> str:
        return harness.start(self.pipeline_arn, execution_input, name)

    def started(self) -> list[str]:
        """Service jobs in the order Batch started them."""
        seen: list[str] = []
        for name, status in self.batch.transitions:
            if status == "SCHEDULED" and name not in seen:
                seen.append(name)
        return seen

    def submitted(self, name: str) -> None:
        """Wait until the pipeline submitted service job `name`: the next execution's place in the queue
        depends on it."""
        harness.wait_until(lambda: any(job.name == name for job in self.batch.jobs.values()))


def install_queue(queue, sagemaker: FakeSageMaker, clock, monkeypatch, naming: str = "awsbatch") -> FakeBatch:
    """FakeBatch as the config's queue (`queue`: its QueueSettings) answering Batch's API."""
    batch = FakeBatch(
        sagemaker=sagemaker,
        max_instances=queue.max_instances,
        weight_factors={name: weight_factor(weight) for name, weight in queue.shares.items()},
        capacity_wait_seconds=queue.capacity_wait_seconds,
        now=clock.time,
        training_job_names=naming,
    )
    install_fake_batch(batch, monkeypatch)
    return batch


def queue_for(pipeline: QueuedPipeline, monkeypatch, scripts, naming: str = "awsbatch") -> Any:
    """The queue world; a profile with `registry:` registers its Completed runs, their evaluation jobs
    submitted to the queue as the attempts are (docs/queue.md, "Evaluation jobs")."""
    sagemaker = scripted_sagemaker(job_scripts=scripts, evaluation_script=evaluated(2.0))
    context = harness.pipeline_environment(sagemaker, monkeypatch)
    clock = context.__enter__()
    deploy_registry_resources(pipeline.settings)
    batch = install_queue(pipeline.settings.queue, sagemaker, clock, monkeypatch, naming)
    create_tables(pipeline.template, harness.REGION)
    harness.create_state_machine(pipeline.attempt, "trainstack-pipeline-attempt")
    harness.create_state_machine(pipeline.registration, "trainstack-pipeline-registration")
    harness.create_state_machine(pipeline.manifest, "trainstack-dataset-manifest")
    arn = harness.create_state_machine(pipeline.pipeline, "trainstack-pipeline")
    cleanup = harness.create_state_machine(pipeline.queue_cleanup, "trainstack-queue-cleanup")
    return context, Queue(sagemaker, batch, arn, cleanup)


@pytest.fixture(params=TRAINING_JOB_NAMES)
def fifo(fifo_pipeline, monkeypatch, request):
    """The FIFO queue, under each plausible naming of the training jobs Batch starts (docs/emulator.md)."""
    context, queue = queue_for(
        fifo_pipeline, monkeypatch, [[STARTING, TRAINING, TRAINING, COMPLETED]], request.param
    )
    yield queue
    context.__exit__(None, None, None)


@pytest.fixture
def fair(fair_pipeline, monkeypatch):
    # The first job runs until the test releases it; the others complete.
    context, queue = queue_for(
        fair_pipeline, monkeypatch, [[STARTING, TRAINING], [STARTING, TRAINING, COMPLETED]]
    )
    yield queue
    context.__exit__(None, None, None)


def release_first_job(queue: Queue) -> None:
    # The job is in the queue before Batch creates its training job (within the same submit call).
    harness.wait_until(lambda: queue.sagemaker.jobs)
    next(iter(queue.sagemaker.jobs.values())).run.phases.append(COMPLETED)


def test_second_run_waits_runnable_while_the_first_uses_the_instances_then_runs(fifo):
    first = fifo.start("first", {"runName": "trainstack-first"})
    fifo.submitted(service_job("trainstack-first-1"))
    second = fifo.start("second", {"runName": "trainstack-second"})
    outcomes = [harness.wait_for(first), harness.wait_for(second)]
    assert [outcome.status for outcome in outcomes] == ["SUCCEEDED", "SUCCEEDED"], [o.cause for o in outcomes]
    # The training job Batch started, under Batch's name for it.
    assert (
        outcomes[1].output["trainingJobName"]
        == fifo.batch.training_jobs_of(service_job("trainstack-second-1"))[0]
    )
    assert outcomes[1].output["checkpointUri"] == "s3://trainstack-checkpoints-test/trainstack-second/"
    transitions = fifo.batch.transitions
    assert (service_job("trainstack-second-1"), "RUNNABLE") in transitions
    assert transitions.index((service_job("trainstack-second-1"), "SCHEDULED")) > transitions.index(
        (service_job("trainstack-first-1"), "SUCCEEDED")
    )
    # The same CreateTrainingJob request the direct pipeline sends, as the service job's payload.
    [payload] = [
        json.loads(call["serviceRequestPayload"])
        for operation, call in fifo.batch.calls
        if operation == "SubmitServiceJob" and call["jobName"] == service_job("trainstack-second-1")
    ]
    assert payload["TrainingJobName"] == "trainstack-second-1"
    assert [p["InstanceType"] for p in payload["ResourceConfig"]["InstancePreferences"]] == [
        "ml.p5.48xlarge",
        "ml.p4de.24xlarge",
    ]


def test_capacity_error_is_retried_by_batch_and_resumes_from_the_same_checkpoint(fifo):
    fifo.sagemaker.behaviour.script([[CAPACITY_FAILURE], [STARTING, TRAINING, COMPLETED]])
    outcome = harness.wait_for(fifo.start("run", {"runName": "trainstack-retry"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["attempts"] == 1  # one submission; Batch did the retry
    assert {job["CheckpointConfig"]["S3Uri"] for job in fifo.sagemaker.created} == {
        "s3://trainstack-checkpoints-test/trainstack-retry/"
    }
    assert len(fifo.sagemaker.created) == 2
    assert (
        outcome.output["trainingJobName"]
        == fifo.batch.training_jobs_of(service_job("trainstack-retry-1"))[-1]
    )


def test_an_infrastructure_fault_is_submitted_again_as_the_next_attempt_on_the_same_checkpoint(fifo):
    """Batch retries capacity only; the pipeline retries a fault with a new service job `<run>-2`."""
    fifo.sagemaker.behaviour.script([[STARTING, TRAINING, NCCL], [STARTING, TRAINING, COMPLETED]])
    outcome = harness.wait_for(fifo.start("run", {"runName": "trainstack-fault"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["attempts"] == 2
    assert [(r["attempt"], r["class"], r["kind"]) for r in outcome.output["retriedFaults"]] == [
        (1, "infrastructure", "nccl")
    ]
    submitted = [call["jobName"] for operation, call in fifo.batch.calls if operation == "SubmitServiceJob"]
    assert submitted == [service_job("trainstack-fault-1"), service_job("trainstack-fault-2")]
    assert {job["CheckpointConfig"]["S3Uri"] for job in fifo.sagemaker.created} == {
        "s3://trainstack-checkpoints-test/trainstack-fault/"
    }


def test_a_user_error_in_queue_mode_fails_at_once(fifo):
    fifo.sagemaker.behaviour.script([[STARTING, USER_CONFIG]])
    outcome = harness.wait_for(fifo.start("run", {"runName": "trainstack-usererr"}))
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingFailed")
    assert outcome.cause.endswith("Classified: user error (config).")
    assert len(fifo.sagemaker.created) == 1


def test_a_refused_start_of_the_attempt_is_retried_in_queue_mode_too(fifo, monkeypatch):
    refusals = harness.refuse_start_executions(
        monkeypatch, state_machine_arn("trainstack-pipeline-attempt"), times=1
    )
    outcome = harness.wait_for(fifo.start("run", {"runName": "trainstack-refused"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert refusals.refused == 1
    assert [event["taskFailedEventDetails"]["error"] for event in outcome.events("TaskFailed")] == [
        "StepFunctions.ExecutionLimitExceeded"
    ]
    assert [job.name for job in fifo.batch.jobs.values()] == [service_job("trainstack-refused-1")]


def test_capacity_never_coming_ends_as_capacity_exhausted(fifo):
    fifo.sagemaker.behaviour.script([[STARTING, STARTING, CAPACITY_FAILURE]])
    outcome = harness.wait_for(fifo.start("run", {"runName": "trainstack-starved"}))
    assert outcome.error == "CapacityExhausted"
    assert "capacity_wait_hours" in outcome.cause


@pytest.fixture(scope="module")
def nccl_pipeline(tmp_path_factory) -> QueuedPipeline:
    # Batch's default capacity wait (24 h) is longer than nccl-test's own time limit (11 h: 1 h runtime,
    # 4 h retry deadline, 6 h start-up allowance).
    return queued_pipeline({"enabled": True, "max_instances": 2, "capacity_wait_hours": 24}, tmp_path_factory)


def test_a_capacity_wait_longer_than_the_profiles_time_limit_ends_as_capacity_exhausted(
    nccl_pipeline, monkeypatch
):
    # Each training job waits about 3 hours (SCHEDULED) and then fails for capacity: Batch counts only that
    # time toward its 24 h limit, and the pipeline's own time limit must not count it at all.
    waiting = [STARTING] * 20 + [CAPACITY_FAILURE]
    context, queue = queue_for(nccl_pipeline, monkeypatch, [waiting])
    try:
        outcome = harness.wait_for(
            queue.start("nccl", {"runName": "trainstack-nccl", "profile": "nccl-test"})
        )
        assert (outcome.error, outcome.status) == ("CapacityExhausted", "FAILED"), outcome.cause
        assert "capacity_wait_hours" in outcome.cause
        [job] = queue.batch.jobs.values()
        assert job.capacity_wait >= 24 * 3600 > 11 * 3600
        assert len(job.training_jobs) > 1  # Batch tried again and again
        assert not queue.sagemaker.stop_requests  # the pipeline never stopped a job for its time limit
    finally:
        context.__exit__(None, None, None)


def test_a_user_stop_ends_the_run_and_the_cleanup_takes_its_started_job_down(fifo):
    import boto3

    fifo.sagemaker.behaviour.script([[STARTING, TRAINING]])  # runs until stopped
    running = fifo.start("running", {"runName": "trainstack-running"})
    harness.wait_until(lambda: fifo.batch.training_jobs_of(service_job("trainstack-running-1")))
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    stepfunctions.stop_execution(executionArn=running)
    assert harness.wait_for(running).status == "ABORTED"
    cleanup = harness.wait_for(harness.start(fifo.cleanup_arn, ended_event(running), "cleanup-running"))
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    [job] = fifo.batch.jobs.values()
    assert (job.status, job.terminated) == ("FAILED", True)
    # Batch stopped the training job it had started, under its own name.
    assert fifo.sagemaker.stop_requests == fifo.batch.training_jobs_of(service_job("trainstack-running-1"))


def ended_event(execution_arn: str) -> dict[str, Any]:
    """The event EventBridge delivers to the queue cleanup for an execution that ended."""
    import boto3

    described = boto3.client("stepfunctions", region_name=harness.REGION).describe_execution(
        executionArn=execution_arn
    )
    return {
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": described["stateMachineArn"],
            "name": described["name"],
            "status": described["status"],
            "input": described["input"],
        },
    }


def test_a_job_larger_than_the_queue_is_invalid_input_and_never_submitted(fifo):
    outcome = harness.wait_for(fifo.start("big", {"runName": "trainstack-big", "instanceCount": 3}))
    assert (outcome.error, outcome.cause) == (
        "InvalidInput",
        "instanceCount must be at most 2, the queue's capacity (queue.max_instances).",
    )
    # Only this run's calls: an execution of an earlier test may still poll the (process-wide) fake.
    assert not [call for call in fifo.batch.calls if call[1].get("jobName", "").startswith("trainstack-big")]


def test_priorities_order_the_waiting_jobs(fair):
    executions = [
        fair.start("blocker", {"runName": "trainstack-blocker", "instanceCount": 3, "share": "teamA"})
    ]
    fair.submitted(service_job("trainstack-blocker-1"))
    for name, priority in (("low", 1), ("high", 500)):
        executions.append(
            fair.start(name, {"runName": f"trainstack-{name}", "priority": priority, "share": "teamA"})
        )
        fair.submitted(service_job(f"trainstack-{name}-1"))
    release_first_job(fair)
    assert [harness.wait_for(execution).status for execution in executions] == ["SUCCEEDED"] * 3
    assert fair.started() == [
        service_job("trainstack-blocker-1"),
        service_job("trainstack-high-1"),
        service_job("trainstack-low-1"),
    ]
    schedule = {job.name: job.request.get("schedulingPriority") for job in fair.batch.jobs.values()}
    assert schedule == {
        service_job("trainstack-blocker-1"): 10,
        service_job("trainstack-low-1"): 1,
        service_job("trainstack-high-1"): 500,
    }


def test_fair_share_gives_the_heavier_share_more_instances(fair):
    plan = (
        [("blocker", 3, "teamB")]
        + [(f"a{i}", 1, "teamA") for i in range(2)]
        + [(f"b{i}", 1, "teamB") for i in range(2)]
    )
    executions = []
    for name, count, share in plan:
        executions.append(
            fair.start(name, {"runName": f"trainstack-{name}", "instanceCount": count, "share": share})
        )
        fair.submitted(service_job(f"trainstack-{name}-1"))
    release_first_job(fair)
    assert all(harness.wait_for(execution).status == "SUCCEEDED" for execution in executions)
    # Three 1-instance jobs fit once the blocker ended: teamA (weight 2) got two, teamB one.
    assert fair.started()[1:4] == [
        service_job("trainstack-a0-1"),
        service_job("trainstack-b0-1"),
        service_job("trainstack-a1-1"),
    ]


def test_share_defaults_to_the_first_and_priority_to_the_profile_and_unknown_shares_are_invalid(fair):
    outcome = harness.wait_for(fair.start("odd", {"runName": "trainstack-odd", "share": "teamC"}))
    assert (outcome.error, outcome.cause) == (
        "InvalidInput",
        "share must be one of the queue's shares: teamA, teamB.",
    )
    plain = fair.start("plain", {"runName": "trainstack-plain"})
    fair.submitted(service_job("trainstack-plain-1"))
    release_first_job(fair)
    assert harness.wait_for(plain).status == "SUCCEEDED"
    [job] = fair.batch.jobs.values()
    assert (job.request["shareIdentifier"], job.request["schedulingPriority"]) == ("teamA", 10)


def test_aborting_a_run_while_it_waits_takes_its_job_out_of_the_queue(fifo):
    import boto3

    from tests.queue.test_fake_batch import payload

    # Another team's job holds both instances (submitted outside the pipeline, so nothing polls it and the
    # virtual clock only moves for the run under test).
    boto3.client("batch", region_name=harness.REGION).submit_service_job(
        jobName=service_job("trainstack-other-1"),
        jobQueue="trainstack-training",
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=payload("trainstack-other-1"),
    )
    waiting = fifo.start("waiting", {"runName": "trainstack-waiting"})
    fifo.submitted(service_job("trainstack-waiting-1"))
    stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
    stepfunctions.stop_execution(executionArn=waiting)
    assert harness.wait_for(waiting).status == "ABORTED"  # moto reflects a stop on the execution's thread
    cleanup = harness.wait_for(harness.start(fifo.cleanup_arn, ended_event(waiting), "cleanup-waiting"))
    assert cleanup.status == "SUCCEEDED", cleanup.cause
    [job] = [job for job in fifo.batch.jobs.values() if job.name == service_job("trainstack-waiting-1")]
    assert (job.status, job.terminated) == ("FAILED", True)
    assert job.status_reason == f"trainstack cleanup: execution {waiting} ended"
    assert (
        fifo.batch.training_jobs_of(service_job("trainstack-waiting-1")) == []
    )  # the aborted run's job never started


# ------------------------------------------------ quota refusals (stacks/pipeline/quota_waits.py)


@pytest.fixture
def quota_queue(fifo_pipeline, monkeypatch):
    """The FIFO queue; `quota_queue(errors, refusals)` scripts SageMaker's create errors and how Batch
    takes a quota refusal (FakeBatch.quota_refusals: both are assumed, docs/emulator.md)."""
    contexts = []

    def start(create_errors, refusals: str = "fail") -> Queue:
        context, queue = queue_for(fifo_pipeline, monkeypatch, [[STARTING, TRAINING, COMPLETED]])
        contexts.append(context)
        queue.sagemaker.create_errors = list(create_errors)
        queue.batch.quota_refusals = refusals
        return queue

    yield start
    for context in contexts:
        context.__exit__(None, None, None)


def submitted(queue: Queue) -> list[dict[str, Any]]:
    """The SubmitServiceJob calls."""
    return [call for operation, call in queue.batch.calls if operation == "SubmitServiceJob"]


def submitted_preferences(queue: Queue) -> list[list[str]]:
    return [
        [
            p["InstanceType"]
            for p in json.loads(call["serviceRequestPayload"])["ResourceConfig"].get(
                "InstancePreferences", []
            )
        ]
        for call in submitted(queue)
    ]


def test_queued_quota_busy_then_free_is_submitted_again_after_the_capacity_back_off(quota_queue):
    queue = quota_queue([busy("ml.g5.12xlarge", "spot training")])
    outcome = harness.wait_for(
        queue.start("run", {"profile": "small-torchrun", "runName": "trainstack-qbusy"})
    )
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (outcome.output["attempts"], len(outcome.output["quotaWaits"])) == (2, 1)
    # small-torchrun registers: its evaluation job is submitted to the queue too.
    assert [json.loads(call["serviceRequestPayload"])["TrainingJobName"] for call in submitted(queue)] == [
        "trainstack-qbusy-1",
        "trainstack-qbusy-2",
        "trainstack-qbusy-eval",
    ]
    evaluation = json.loads(submitted(queue)[-1]["serviceRequestPayload"])
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"] for c in evaluation["InputDataConfig"]}
    # Its model: the output of the training job Batch started and named.
    assert f"/{outcome.output['trainingJobName']}/output/model/" in channels["model"]["S3Uri"]
    # The run's tags: the job cleanup stops it as it stops a direct-mode job of an ended execution.
    assert "trainstack:execution" in {tag["Key"] for tag in evaluation["Tags"]}
    assert outcome.output["modelPackage"]["status"] == "Registered"
    # Its lineage names the training jobs that ran, as Batch named them.
    version = boto3.client("sagemaker").describe_model_package(
        ModelPackageName=outcome.output["modelPackage"]["modelPackageArn"]
    )
    jobs = version["CustomerMetadataProperties"][LINEAGE_KEYS["jobs"]].split(" ")
    assert jobs[-1] == outcome.output["trainingJobName"] and jobs[-1].startswith("AWSBatch")
    evaluation_job = version["CustomerMetadataProperties"][LINEAGE_KEYS["evaluationJob"]]
    assert evaluation_job.startswith("AWSBatch") and evaluation_job in queue.sagemaker.jobs
    assert set(jobs) == set(queue.sagemaker.jobs) - {evaluation_job}


def test_queued_quota_busy_on_the_first_preference_submits_the_second(quota_queue):
    queue = quota_queue([busy(P5)])
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qhop"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert submitted_preferences(queue) == [[P5, P4DE], [P4DE]]
    assert outcome.output["instanceType"] == P4DE


def test_queued_request_above_every_limit_fails_fast_with_quota_exceeded(quota_queue):
    queue = quota_queue([exceeded(P5), exceeded(P4DE)])
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qover"}))
    assert (outcome.status, outcome.error) == ("FAILED", "QuotaExceeded")
    assert "exceed quota 'ml.p4de.24xlarge for training job usage' of 1 instances" in outcome.cause
    assert "over their quotas too: ml.p5.48xlarge for training job usage." in outcome.cause
    assert len(submitted_preferences(queue)) == 2


def test_queued_quota_busy_forever_ends_with_capacity_exhausted(quota_queue):
    queue = quota_queue([busy(P5), busy(P4DE)] * 2)
    outcome = harness.wait_for(queue.start("run", {"profile": "nccl-test", "runName": "trainstack-qforever"}))
    assert (outcome.status, outcome.error) == ("FAILED", "CapacityExhausted")
    assert outcome.cause.startswith("No capacity after 4 attempts (profile nccl-test allows 3)")
    assert "is busy" in outcome.cause


def test_queued_quota_refusal_that_batch_keeps_runnable_waits_in_the_queue(quota_queue):
    """The other plausible Batch behaviour: the job waits RUNNABLE and Batch tries again; the pipeline sees
    no refusal and the run succeeds with its one submission."""
    queue = quota_queue([busy(P5)], refusals="runnable")
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qwait"}))
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert (outcome.output["attempts"], outcome.output["quotaWaits"]) == (1, [])


def test_queued_quota_refusal_without_the_known_wording_is_quota_exceeded(quota_queue):
    queue = quota_queue([("ResourceLimitExceeded", "")])
    outcome = harness.wait_for(queue.start("run", {"runName": "trainstack-qodd"}))
    assert (outcome.status, outcome.error) == ("FAILED", "QuotaExceeded")
    assert "its wording was not recognised, so it is treated as exceeded" in outcome.cause


def test_the_evaluation_job_goes_through_the_queue_on_the_runs_share_and_priority(fair_pipeline, monkeypatch):
    """Fails on a registration machine that creates the evaluation job itself: it must be a service job of
    the run (found by the run's prefix, so the queue cleanup terminates it too), with the run's share and
    priority, and the version names the training job Batch started for it."""
    context, queue = queue_for(fair_pipeline, monkeypatch, [[STARTING, TRAINING, COMPLETED]])
    try:
        execution_input = {
            "profile": "small-torchrun",
            "runName": "trainstack-qeval",
            "share": "teamB",
            "priority": 7,
        }
        outcome = harness.wait_for(queue.start("run", execution_input))
        assert outcome.status == "SUCCEEDED", outcome.cause
        [version] = versions()
    finally:
        context.__exit__(None, None, None)
    calls = submitted(queue)
    names = [json.loads(call["serviceRequestPayload"])["TrainingJobName"] for call in calls]
    assert names == ["trainstack-qeval-1", "trainstack-qeval-eval"]
    assert [call["jobName"] for call in calls] == [
        service_job("trainstack-qeval-1"),
        service_job_name(QUEUE_NAME, "trainstack-qeval", evaluation_job_key(1)),
    ]
    assert [(call["shareIdentifier"], call["schedulingPriority"]) for call in calls] == [("teamB", 7)] * 2
    # No training job is created outside the queue: every one is Batch's.
    assert all(name.startswith("AWSBatch") for name in queue.sagemaker.jobs), list(queue.sagemaker.jobs)
    evaluation_job = version["CustomerMetadataProperties"]["evaluation.jobName"]
    assert evaluation_job.startswith("AWSBatch") and evaluation_job in queue.sagemaker.jobs
    assert version["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"].endswith(
        f"/{evaluation_job}/output/model/evaluation.json"
    )
    assert outcome.output["modelPackage"]["status"] == "Registered"
