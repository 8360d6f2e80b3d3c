"""The demo's narration: timestamped lines, and the retraining's story told from its jobs and MLflow runs."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from localaws.demo import mlflow_runs
from localaws.sagemaker.local_processes import LocalTraining
from localaws.sagemaker.training_jobs import FakeSageMaker
from trainstack.faults import CAPACITY, classify, describe
from trainstack.job_request import RUN_TAG
from trainstack.profiles import Profile

# What a restarted round of train.py logs first (training_scripts/in_job_restart.py).
IN_JOB_RESTART = "In-job restart"


def say(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S}  {message}", flush=True)


def report_attempts(sagemaker: FakeSageMaker, training: LocalTraining, run_name: str) -> None:
    """The first run's attempts: its jobs tagged with the run (named <run>-<N>, or by AWS Batch in queue mode)
    with TensorBoard output, which every attempt has and its evaluation, which carries the run's tags too, has
    not (trainstack/job_request.py, stacks/pipeline/registry/evaluation_request.py): the registry lines above
    tell the evaluation's story."""
    run_tag = {"Key": RUN_TAG, "Value": run_name}
    attempts = [
        job
        for job in sagemaker.jobs.values()
        if run_tag in job.request.get("Tags", []) and "TensorBoardOutputConfig" in job.request
    ]
    for number, job in enumerate(sorted(attempts, key=lambda job: job.created), start=1):
        phase = job.current()
        status, reason, log_path = phase.status, phase.failure_reason, job.run.log_path
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        # How the job started: its first round, before any in-job restart (training_scripts/in_job_restart.py)
        resumed = re.search(r"Resumed from \S+ \(step (\d+)\)", log.split(IN_JOB_RESTART, 1)[0])
        restarts = re.findall(rf"{IN_JOB_RESTART} \d+: .*? after trainstack-fault:(\S+)", log)
        steps = re.findall(r"\bstep[ =:]+(\d+)", log)
        story = (
            f"resumed from the checkpoint of step {resumed.group(1)}" if resumed else "started from scratch"
        )
        end = f"ended {status}" + (f": {reason.split('.')[0]}" if reason else "")
        if status == "Failed" and reason and classify(reason).fault_class != CAPACITY:
            end += f" [{describe(classify(reason))}]"
        if restarts:
            story += f", {len(restarts)} in-job restart(s) after {', '.join(restarts)}"
        last = f", last logged step {steps[-1]}" if steps else ""
        board = job.request.get("TensorBoardOutputConfig", {}).get("S3OutputPath")
        events = f"; TensorBoard event files in {training.local_path(board)}" if board else ""
        say(f"   attempt {number}: {job.name} {story}{last}, {end}{events}")


def report_mlflow(profile: Profile, training: LocalTraining) -> None:
    """Every job's MLflow run, from the local store standing for the profile's tracking server."""
    profile_name, server = profile.name, profile.mlflow_tracking_server_arn
    if server is None:
        say(f"   mlflow: profile {profile_name} names no mlflow_tracking_server_arn: no MLflow runs")
        return
    store = training.mlflow_store(server)
    say(f"   mlflow: {server} stands as the local store {store}, experiment {profile_name}:")
    for line in mlflow_runs.run_lines(store, profile_name):
        say(f"   mlflow:   {line}")
