"""Queued jobs stay within SageMaker's 63 characters whatever the run name: the service job name we submit
leaves room for `AWSBatch` and Batch's 32-hex attempt id (queue_settings.py), so neither Batch's cutting
nor SageMaker's refusal of a longer name (undocumented which) can happen."""

from __future__ import annotations

import re

import pytest

from localaws.emulator.batch_jobs import JOB_NAME, SAGEMAKER_NAME_LENGTH, TRAINING_JOB_NAMES
from tests.queue.conftest import QUEUE_NAME, create_machine, service_job
from tests.queue.test_queued_attempt import attempt_definition, attempt_input, run
from trainstack.queue_settings import (
    BATCH_ATTEMPT_ID_LENGTH,
    BATCH_TRAINING_JOB_PREFIX,
    SERVICE_JOB_NAME_MAX_LENGTH,
    queue_job_prefix,
    service_job_name,
)
from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT
from trainstack.run_names import RUN_NAME_MAX_LENGTH

# The longest run name the input rules allow, with the project's prefix (the attempt refuses any other).
LONGEST_RUN = "trainstack-" + "r" * (RUN_NAME_MAX_LENGTH - len("trainstack-"))


def test_the_longest_run_and_attempt_fit_the_budget():
    name = service_job_name(QUEUE_NAME, LONGEST_RUN, MAX_ATTEMPTS_LIMIT)
    assert SERVICE_JOB_NAME_MAX_LENGTH == 23
    assert len(name) <= SERVICE_JOB_NAME_MAX_LENGTH and JOB_NAME.fullmatch(name)
    assert len(BATCH_TRAINING_JOB_PREFIX + name) + BATCH_ATTEMPT_ID_LENGTH <= SAGEMAKER_NAME_LENGTH


def test_names_are_deterministic_unique_per_run_and_attempt_and_start_with_the_queue_key():
    names = {
        service_job_name(QUEUE_NAME, f"trainstack-run{index}", attempt)
        for index in range(200)
        for attempt in (1, 2, 10)
    }
    assert len(names) == 600
    assert all(name.startswith(queue_job_prefix(QUEUE_NAME)) for name in names)
    assert service_job_name(QUEUE_NAME, "trainstack-a", 1) == service_job_name(QUEUE_NAME, "trainstack-a", 1)
    assert queue_job_prefix("other-training") != queue_job_prefix(QUEUE_NAME)


@pytest.mark.parametrize("naming", TRAINING_JOB_NAMES)
def test_the_attempt_submits_the_short_name_and_batchs_job_name_is_never_cut(queue_world, naming):
    """The attempt's JSONata ($hash) names the service job as Python does, for the longest run name; under
    each naming alternative of the fake, Batch's training job name fits uncut."""
    client, batch, _, _ = queue_world
    arn = create_machine(client, "attempt", attempt_definition())
    batch.training_job_names = naming
    outcome = run(client, arn, {"longest": attempt_input(LONGEST_RUN)})["longest"]
    assert outcome.status == "SUCCEEDED" and outcome.output["status"] == "Completed", outcome.cause
    [job] = batch.jobs.values()
    assert job.name == service_job(f"{LONGEST_RUN}-1")
    [training_job] = batch.training_jobs_of(job.name)
    assert len(training_job) <= SAGEMAKER_NAME_LENGTH
    if naming != "payload":
        assert re.fullmatch(rf"AWSBatch{job.name}[0-9a-f]{{32}}", training_job)
