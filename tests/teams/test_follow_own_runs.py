"""Each team follows its own runs, and only them (config/examples/teams.yaml, queue mode), in the emulator:
team research reads its run's job, logs and service job through its run reader (`trainstack-research-run-
reader`, the Express machine its start policy may start with StartSyncExecution), and the reader refuses
team search's, although Batch names both teams' training jobs `AWSBatch<queue key>...`. `trainstack status`
and `logs --team research` print research's run through the reader; given search's run they end in one
sentence.

Both teams' machines are the synthesized definitions of their own stacks, each with its own SageMaker role
(the deployed roles differ; the fake values of the other tests give both teams one).
"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from localaws.demo.synthesized import create_tables
from localaws.sagemaker import STARTING, TRAINING, scripted_sagemaker
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, deploy_registry_resources, state_machine_arn, state_machines
from tests.queue.test_queue_pipeline import filled, install_queue
from tests.teams.test_team_isolation import B_RUN, MACHINES, checkpoint_directory
from trainstack.cli import main
from trainstack.pipeline_runs import shared_queue
from trainstack.queue_settings import run_job_prefix, training_queue_name
from trainstack.run_reader import RunReader, run_reader_name
from trainstack.runs import TRAINING_LOG_GROUP, RunError

A_RUN = "trainstack-research-follow"
QUEUE = training_queue_name("trainstack")  # the teams' shared queue
CONFIG = "config/examples/teams.yaml"


def role_of(team: str) -> str:
    return FAKE_VALUES["SageMakerRoleArn"].replace("trainstack-sagemaker", f"trainstack-{team}-sagemaker")


@pytest.fixture(scope="module")
def definitions(teams_app) -> dict[str, tuple[str, str]]:
    """State machine name -> (its filled definition, its type), each team's with the team's own role."""
    _, stacks, assembly = teams_app
    found = {}
    for stack in stacks.pipelines:
        template = assembly.get_stack_by_name(stack.stack_name).template
        team = stack.stack_name.split("-")[1]
        for name, properties in state_machines(template).items():
            text = filled(properties, template)
            text = text.replace(FAKE_VALUES["CheckpointDirectoryPath"], checkpoint_directory(team))
            text = text.replace(FAKE_VALUES["SageMakerRoleArn"], role_of(team))
            found[name] = (text, properties.get("StateMachineType", "STANDARD"))
    return found


@pytest.fixture(scope="module")
def both_running(teams_app, definitions):
    """Both teams' runs RUNNING, each with the training job Batch started and a log line per host."""
    settings, stacks, assembly = teams_app
    with pytest.MonkeyPatch.context() as monkeypatch:
        sagemaker = scripted_sagemaker(job_scripts=[[STARTING, TRAINING]])
        context = harness.pipeline_environment(sagemaker, monkeypatch)
        clock = context.__enter__()
        try:
            deploy_registry_resources(settings)
            batch = install_queue(shared_queue(settings), sagemaker, clock, monkeypatch)
            for stack in assembly.stacks:  # the run-name table, each team's budget table
                create_tables(stack.template, harness.REGION)
            stepfunctions = boto3.client("stepfunctions", region_name=harness.REGION)
            for team in ("research", "search"):
                for machine in MACHINES:
                    harness.create_state_machine(
                        definitions[f"trainstack-{team}-{machine}"][0], f"trainstack-{team}-{machine}"
                    )
                reader, kind = definitions[run_reader_name(f"trainstack-{team}")]
                assert kind == "EXPRESS"
                stepfunctions.create_state_machine(
                    name=run_reader_name(f"trainstack-{team}"),
                    definition=reader,
                    roleArn=FAKE_VALUES["SageMakerRoleArn"],
                    type="EXPRESS",
                )
            for team, run in (("search", B_RUN), ("research", A_RUN)):
                harness.start(pipeline_of(team), {"runName": run, "profile": "small-torchrun"}, run)
            harness.wait_until(lambda: len(sagemaker.jobs) == 2)
            logs = boto3.client("logs", region_name=harness.REGION)
            logs.create_log_group(logGroupName=TRAINING_LOG_GROUP)
            # CloudWatch Logs refuses events older than 14 days (PutLogEvents): stamped now.
            stamp = int(time.time() * 1000)
            for job in sagemaker.jobs:
                stream = f"{job}/algo-1-{stamp}"
                logs.create_log_stream(logGroupName=TRAINING_LOG_GROUP, logStreamName=stream)
                logs.put_log_events(
                    logGroupName=TRAINING_LOG_GROUP,
                    logStreamName=stream,
                    logEvents=[{"timestamp": stamp, "message": f"step 1 of {job}"}],
                )
            yield batch, sagemaker
        finally:
            context.__exit__(None, None, None)


def pipeline_of(team: str) -> str:
    return state_machine_arn(f"trainstack-{team}-pipeline")


def job_of(sagemaker, run: str) -> str:
    """The training job Batch started for the run's first attempt (its request names the run)."""
    [name] = [name for name, job in sagemaker.jobs.items() if f"/{run}/" in json.dumps(job.request)]
    return name


def reader_of(team: str) -> RunReader:
    return RunReader(
        boto3.client("stepfunctions", region_name=harness.REGION),
        state_machine_arn(run_reader_name(f"trainstack-{team}")),
    )


def test_a_team_reads_its_own_jobs_logs_and_service_jobs_and_not_the_other_teams(both_running):
    batch, sagemaker = both_running
    research = reader_of("research")
    own, other = job_of(sagemaker, A_RUN), job_of(sagemaker, B_RUN)
    assert own.startswith("AWSBatch") and other.startswith("AWSBatch")  # one name scheme for both teams
    assert (
        research.call("describeTrainingJob", "sagemaker", "DescribeTrainingJob", jobName=own)[
            "TrainingJobName"
        ]
        == own
    )
    page = research.call("filterLogEvents", "logs", "FilterLogEvents", jobName=own)
    assert [event["message"] for event in page["events"]] == [f"step 1 of {own}"]
    queue = QUEUE
    [summary] = research.call(
        "listServiceJobs", "batch", "ListServiceJobs", prefix=run_job_prefix(queue, A_RUN)
    )["jobSummaryList"]
    assert (
        research.call("describeServiceJob", "batch", "DescribeServiceJob", jobId=summary["jobId"])[
            "shareIdentifier"
        ]
        == "research"
    )
    # search's job, logs and service job: refused, in one sentence naming what was asked.
    for call, service, operation, arguments in (
        ("describeTrainingJob", "sagemaker", "DescribeTrainingJob", {"jobName": other}),
        ("filterLogEvents", "logs", "FilterLogEvents", {"jobName": other}),
        ("describeServiceJob", "batch", "DescribeServiceJob", {"jobId": _service_job_id(batch, B_RUN)}),
        ("listTrainingJobs", "sagemaker", "ListTrainingJobs", {"runName": B_RUN}),
    ):
        with pytest.raises(RunError, match="is not a run of trainstack-research, nor one of its jobs"):
            research.call(call, service, operation, **arguments)
    # Listing by search's run's service job prefix finds nothing of search's (its share's jobs are left out).
    listed = research.call("listServiceJobs", "batch", "ListServiceJobs", prefix=run_job_prefix(queue, B_RUN))
    assert listed["jobSummaryList"] == []


def _service_job_id(batch, run: str) -> str:
    prefix = run_job_prefix(QUEUE, run)
    [job_id] = [job_id for job_id, job in batch.jobs.items() if job.name.startswith(prefix)]
    return job_id


def test_the_cli_follows_the_teams_own_run_through_its_reader(both_running, capsys):
    _, sagemaker = both_running
    given = ["--team", "research", "--config", CONFIG, "--region", harness.REGION]
    given += ["--state-machine-arn", pipeline_of("research")]
    assert main(["logs", A_RUN, *given]) == 0
    own = job_of(sagemaker, A_RUN)
    assert f"step 1 of {own}" in capsys.readouterr().out
    assert main(["status", A_RUN, *given]) == 0
    assert f"attempt 1 | {own} | InProgress" in capsys.readouterr().out
    # search's execution, named by its ARN: the reader refuses its run (research's reader lists none of
    # search's service jobs, and search's run name is not research's).
    search_execution = pipeline_of("search").replace(":stateMachine:", ":execution:") + f":{B_RUN}"
    assert main(["logs", search_execution, *given]) == 1
    assert capsys.readouterr().err == (
        f"trainstack logs: {B_RUN} is not a run of trainstack-research, nor one of its jobs.\n"
    )
