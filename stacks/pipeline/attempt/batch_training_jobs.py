"""The training jobs AWS Batch started for a queued attempt (queued_training_attempt.py): their names, and
with a cost cap (cost_cap_states.py) what the ones before the latest billed.

Batch starts a new SageMaker training job for each of its attempts at a service job (after a capacity
error it re-submits the job by itself), and each of them bills. So the queued attempt's billed cost is the
sum over all of them: the latest one's, described as the direct attempt describes its job, plus
`$job.endedUsd`, what the earlier ones billed (cost_cap_states.job_usd adds it, so the budget stop, the
poll wait and the pipeline's `$spentUsd` all count it).

The earlier jobs come from DescribeServiceJob's `attempts` list, each described once after it has ended,
rather than from keeping the last figure seen of the latest job when `latestAttempt` changes:
- the list names every training job Batch started (ServiceJobAttemptDetail.serviceResourceId
  {name: TrainingJobArn, value}, botocore's batch model). Polls are up to 30 minutes apart in an old
  attempt, and a training job Batch started and lost between two polls is never anyone's latestAttempt
  when the attempt looks: it would not be counted at all;
- a job described after it ended has its final BillableTimeInSeconds (SageMaker reports it once the job
  has ended); the last poll that saw it running falls short by up to one poll interval of billing.
An earlier job is one whose ARN is not latestAttempt's: Batch starts the next attempt only after the
training job before it ended (a capacity failure sends the service job from SCHEDULED back to RUNNABLE:
LatestServiceJobAttempt's documentation). One still InProgress or Stopping when described (assumed never
to happen) is described again at the next poll, and nothing else happens at this poll. `$ended` keeps the
ARNs counted, a set (the model does not say in which order the list comes).

When an earlier job is counted, `$job.billedSeconds` is cleared: `$job` held that job's figures (it was
described while it was the latest) or none, because an earlier job is counted at the first poll that shows
a newer one, before the newer one is described (a describe that fails sends the attempt to the next poll).
Without a cost cap nothing is counted (the prices come with the cap).
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.attempt.training_attempt import billed_figures, describe_training_job
from stacks.pipeline.cost_cap_states import ATTEMPT_CAP, job_usd
from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.machine_kit import SAGEMAKER_ERROR

# SageMaker's ended statuses (DescribeTrainingJob's TrainingJobStatus, botocore's sagemaker model).
ENDED = '["Completed", "Failed", "Stopped"]'
# The attempt's earlier training jobs not counted yet.
_UNCOUNTED = "$filter($service.earlier, function($arn) { $not($arn in $ended) })"


def training_job_name(arn: str) -> str:
    """The name of a training job Batch started, from its ARN (a JSONata expression): the ARN's last part
    (Batch's guide shows ARNs training-job/AWSBatch<jobName><attemptId>; should SageMaker write the ARN in
    lower case, the attempt's `$job.name` is used when it is that name)."""
    arn_name = f'$split({arn}, "/")[-1]'
    return f"($lowercase($job.name) = {arn_name} ? $job.name : {arn_name})"


def earlier_training_jobs(result: str) -> str:
    """The ARNs of the training jobs Batch started before the latest one, from a DescribeServiceJob
    result (a JSONata expression)."""
    return (
        f"($latest := {result}.LatestAttempt.ServiceResourceId.Value; "
        f"[$filter({result}.Attempts.ServiceResourceId.Value, function($arn) {{ $arn != $latest }})])"
    )


def count_earlier_training_jobs(
    scope: Construct,
    *,
    job_arns: list[str],
    more_permissions: list[iam.PolicyStatement],
    then: sfn.IChainable,
    wait: sfn.IChainable,
) -> sfn.Choice:
    """The states between DescribeServiceJob and `then`: with a cost cap, each earlier training job not
    counted yet is described and its billed cost added to `$job.endedUsd`; `wait` is the next poll."""
    describe = describe_training_job(
        scope,
        construct_id="DescribeEarlierTrainingJob",
        name=training_job_name(f"{_UNCOUNTED}[0]"),
        job_arns=job_arns,
        more_permissions=more_permissions,
        assign={
            "earlier": expression(
                f"($figures := {{{billed_figures('$states.result')}}}; "
                f'{{"arn": {_UNCOUNTED}[0], "status": $states.result.TrainingJobStatus, '
                f'"usd": {job_usd("$figures", ATTEMPT_CAP)}}})'
            )
        },
    )
    # Retries used up: ask again after the next wait.
    describe.add_catch(wait, errors=[SAGEMAKER_ERROR], outputs={})
    to_count = sfn.Choice.jsonata(
        scope, "EarlierTrainingJobToCount", comment="A training job Batch started before the latest one."
    )
    count = sfn.Choice.jsonata(scope, "CountEarlierTrainingJob").when(
        sfn.Condition.jsonata(expression(f"$earlier.status in {ENDED}")),
        to_count,
        assign={
            "ended": expression("$append($ended, $earlier.arn)"),
            "job": expression(
                '$merge([$job, {"billedSeconds": null, "endedUsd": '
                '($type($job.endedUsd) = "number" ? $job.endedUsd : 0) + $earlier.usd}])'
            ),
        },
    )
    count.otherwise(wait)
    describe.next(count)
    capped = f'$type({ATTEMPT_CAP}) = "object"'
    return to_count.when(
        sfn.Condition.jsonata(expression(f"{capped} and $count({_UNCOUNTED}) > 0")), describe
    ).otherwise(then)
