"""The registration machine's evaluation (model_registration.py): create the evaluation job, poll it, and
retry it for what the training attempts retry (docs/registry.md, "Evaluation failures and retries").

Each try ends in `$outcome` {"status", "cause", "job", "fault", "quota"}, shaped like a training attempt's
output (attempt/training_attempt.py), so the pipeline's retry decisions (fault_retries.py) apply unchanged
to the machine's variables of the same names: `$attempt` (the evaluation job's number, which names it:
evaluation_request.EVALUATION_JOB_NAME), `$faults`, `$retriedFaults`, `$backoffSeconds` and `$plan`: the
profile's `retry` and `fault_retries` settings as the pipeline's plan holds them (pipeline_input_rules.
retry_settings, in the registry table), with both deadlines at the evaluation's own start plus
`retry.deadline_hours` (the run's deadline counts from before training):
- capacity (the fault table's capacity class, in a job's FailureReason or in a refused CreateTrainingJob's
  message; spot capacity that never came), a throttled CreateTrainingJob and a busy quota
  (trainstack.quota): a new evaluation job after the capacity back-off, while `retry.max_attempts` and the
  deadline allow;
- an infrastructure fault: a new evaluation job after the `fault_retries` back-off, up to
  `fault_retries.max_retries`; an unknown failure: once (UNKNOWN_RETRIES), as for training;
- anything else (a user error, a job that reports no evaluation loss, a request SageMaker rejects, an
  exceeded quota, a stopped job) and a spent budget: EvaluationFailed, its cause naming the last job, its
  reason, why it was not retried and how many evaluation jobs were tried.
"""

from __future__ import annotations

from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.fault_retries import (
    NO_FAULTS_YET,
    capacity_attempts,
    capacity_retry_allowed,
    described_fault,
    earlier_retries,
    fault_retry_assignments,
    fault_retry_condition,
)
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.machine_kit import (
    SAGEMAKER_ERROR,
    SAGEMAKER_QUOTA_ERROR,
    THROTTLE_CAUSE,
    literal_partition,
    retry_poll_call,
)
from stacks.pipeline.pipeline_input_rules import backoff_seconds_expression
from stacks.pipeline.quota_waits import QUOTA_STATUS, quota_outcome
from stacks.pipeline.registry.evaluation_request import EVALUATION_JOB_NAME, evaluation_metrics
from stacks.pipeline.state_machine_facts import poll_seconds_expression
from trainstack.faults import (
    CAPACITY,
    INFRASTRUCTURE,
    SPOT_CAPACITY_SECONDARY_STATUS,
    UNKNOWN_RETRIES,
    USER,
    capacity_expression,
    fault_expression,
)

EVALUATION_FAILED = "EvaluationFailed"
# Outcomes retried on the capacity budget: a quota refusal too when the quota is busy.
_CAPACITY_LIKE = (
    f'($outcome.status in ["Capacity", "Throttled"] or '
    f'($outcome.status = "{QUOTA_STATUS}" and $outcome.quota.busy = true))'
)


def evaluation_states(
    scope: Construct, *, job_arn: str, request: str, completed: sfn.IChainable
) -> sfn.IChainable:
    """From CreateEvaluationJob (the `request` JSONata) to `completed` (the job reported its evaluation
    loss into $evaluation) or the machine's output {"status": "EvaluationFailed", "cause"}."""
    plan = sfn.Pass.jsonata(
        scope,
        "PlanEvaluation",
        comment="Job 1, no fault retried yet; the profile's retry settings, the deadline from now.",
        assign={
            "attempt": 1,
            "faults": expression(NO_FAULTS_YET),
            "retriedFaults": expression("[]"),
            "plan": expression(
                "($d := $millis() + 1000 * $settings.retry.deadlineSeconds; "
                '$merge([$settings.retry, {"profile": $run.profile, "deadlineMillis": $d, '
                '"faultDeadlineMillis": $d}]))'
            ),
        },
    )
    create = sagemaker_call(
        scope,
        "CreateEvaluationJob",
        "createTrainingJob",
        request,
        {"job": expression(f'{{"name": {EVALUATION_JOB_NAME}, "createdMillis": $millis()}}')},
    )
    wait = sfn.Wait.jsonata(
        scope,
        "WaitForEvaluation",
        time=sfn.WaitTime.seconds(
            expression(poll_seconds_expression("($millis() - $job.createdMillis) / 1000"))
        ),
    )
    describe = _describe_evaluation(scope, job_arn, wait)
    failed = sfn.Succeed.jsonata(
        scope,
        "ReportEvaluationFailed",
        outputs=expression(f'{{"status": "{EVALUATION_FAILED}", "cause": {_failed_cause()}}}'),
    )
    classify = _classify(scope, create, failed)
    create.add_catch(
        classify,
        errors=[SAGEMAKER_QUOTA_ERROR],
        outputs={},
        assign={
            "outcome": quota_outcome(
                "$states.errorOutput.Cause", f'"SageMaker refused evaluation job " & {EVALUATION_JOB_NAME}'
            )
        },
    )
    create.add_catch(classify, errors=[SAGEMAKER_ERROR], outputs={}, assign={"outcome": _create_error()})
    create.add_catch(
        classify,
        errors=["States.ALL"],
        outputs={},
        assign={"outcome": expression(f'{{"status": "Rejected", "cause": {_could_not_start()}}}')},
    )
    check = (
        sfn.Choice.jsonata(scope, "CheckEvaluation")
        .when(
            sfn.Condition.jsonata(expression('$status = "Completed" and $type($evaluation.loss) = "number"')),
            completed,
        )
        .when(
            sfn.Condition.jsonata(expression('$status in ["Completed", "Failed", "Stopped"]')),
            classify,
            assign={"outcome": _ended()},
        )
        .otherwise(wait)
    )
    create.next(wait).next(describe).next(check)
    return plan.next(create)


def sagemaker_call(
    scope: Construct, state_id: str, action: str, arguments: str, assign: dict[str, str]
) -> sfn.CustomState:
    """A SageMaker call whose request is one JSONata value (CallAwsService takes an object of fields
    only, hence a custom state); its permissions are granted in ModelRegistration._grant."""
    return sfn.CustomState(
        scope,
        state_id,
        state_json={
            "Type": "Task",
            "Resource": f"arn:{literal_partition(scope)}:states:::aws-sdk:sagemaker:{action}",
            "Arguments": expression(arguments),
            "Assign": assign,
            "Output": {},
        },
    )


def _describe_evaluation(scope: Construct, job_arn: str, wait: sfn.Wait) -> tasks.CallAwsService:
    """DescribeTrainingJob of the evaluation job into $status, $secondary, $reason and $evaluation; a
    throttled call waits for the next poll."""
    describe = tasks.CallAwsService.jsonata(
        scope,
        "DescribeEvaluationJob",
        service="sagemaker",
        action="describeTrainingJob",
        parameters={"TrainingJobName": expression(EVALUATION_JOB_NAME)},
        iam_resources=[job_arn],
        assign={
            "status": expression("$states.result.TrainingJobStatus"),
            "secondary": expression("$states.result.SecondaryStatus"),
            "reason": expression("$states.result.FailureReason ? $states.result.FailureReason : null"),
            "evaluation": expression(evaluation_metrics()),
        },
        outputs={},
    )
    retry_poll_call(describe, [SAGEMAKER_ERROR])
    describe.add_catch(wait, errors=[SAGEMAKER_ERROR], outputs={})
    return describe


def _could_not_start() -> str:
    return f'"Evaluation job " & {EVALUATION_JOB_NAME} & " could not start: " & $states.errorOutput.Cause'


def _create_error() -> str:
    """A refused CreateTrainingJob that SageMaker's model does not declare (SageMakerException: the code
    only in the Cause, DESIGN.md): throttling, capacity as the fault table words it, else a rejection."""
    cause = "$states.errorOutput.Cause"
    return expression(
        f"$contains({cause}, {THROTTLE_CAUSE}) ? "
        f'{{"status": "Throttled", "cause": "SageMaker throttled CreateTrainingJob of evaluation job " & '
        f'{EVALUATION_JOB_NAME} & ": " & {cause}}} : '
        f'({capacity_expression(cause)}) ? {{"status": "Capacity", "cause": "SageMaker found no capacity for '
        f'evaluation job " & {EVALUATION_JOB_NAME} & ": " & {cause}}} : '
        f'{{"status": "Rejected", "cause": {_could_not_start()}}}'
    )


def _ended() -> str:
    """The outcome of a job that ended without an evaluation loss: capacity (as the training attempts
    read it), another failure with its fault class, or a job that stopped or reported no loss."""
    ended = (
        '"Evaluation job " & $job.name & " ended " & $status & '
        '($reason ? ": " & $reason : ($secondary ? " (" & $secondary & ")" : ""))'
    )
    return expression(
        f"($f := {fault_expression('$reason')}; "
        '$status = "Completed" ? {"status": "NoLoss", "cause": "Evaluation job " & $job.name & '
        '" completed but reported no evaluation:loss metric"} : '
        f'($status = "Failed" and $f.class = {literal(CAPACITY)}) or ($status = "Stopped" and '
        f"$secondary = {literal(SPOT_CAPACITY_SECONDARY_STATUS)}) ? "
        f'{{"status": "Capacity", "cause": {ended}}} : '
        f'$status = "Failed" ? {{"status": "Failed", "cause": {ended}, "job": $job, "fault": $f}} : '
        f'{{"status": $status, "cause": {ended}}})'
    )


def _classify(scope: Construct, create: sfn.IChainable, failed: sfn.IChainable) -> sfn.Choice:
    """Another evaluation job after a back-off, on the capacity budget or the fault budget, or the end."""
    wait_before_retry = sfn.Wait.jsonata(
        scope, "WaitBeforeEvaluationRetry", time=sfn.WaitTime.seconds(expression("$backoffSeconds"))
    )
    wait_before_retry.next(create)
    return (
        sfn.Choice.jsonata(scope, "ClassifyEvaluation")
        .when(
            sfn.Condition.jsonata(expression(f"{_CAPACITY_LIKE} and {capacity_retry_allowed()}")),
            wait_before_retry,
            assign={
                "attempt": expression("$attempt + 1"),
                "backoffSeconds": expression(
                    backoff_seconds_expression("$plan.backoff", capacity_attempts())
                ),
            },
            comment="No capacity, throttled or a busy quota: a new job after the capacity back-off.",
        )
        .when(
            sfn.Condition.jsonata(expression(fault_retry_condition())),
            wait_before_retry,
            assign={name: expression(value) for name, value in fault_retry_assignments().items()},
            comment="An infrastructure fault (or an unknown failure, once): a new evaluation job.",
        )
        .otherwise(failed)
    )


def _failed_cause() -> str:
    """The last try's cause, why no retry follows, the earlier fault retries and the jobs tried."""
    capacity = (
        f"{capacity_attempts()} >= $plan.maxAttempts "
        f'? "No capacity after " & $string({capacity_attempts()}) & " tries (profile " & $plan.profile & '
        '" allows " & $string($plan.maxAttempts) & ", retry.max_attempts)." '
        ': "No capacity within the retry deadline of " & $string($plan.deadlineSeconds) & " seconds from '
        'the evaluation\'s start (retry.deadline_hours of profile " & $plan.profile & ")."'
    )
    deadline = '"the next evaluation job could not start within the retry deadline (retry.deadline_hours)"'
    not_retried = (
        f'$outcome.fault.class = {literal(USER)} ? "which is not retried" : '
        f"$outcome.fault.class = {literal(INFRASTRUCTURE)} ? "
        "($faults.infrastructure >= $plan.faultRetries.maxRetries ? "
        '"profile " & $plan.profile & " allows " & $string($plan.faultRetries.maxRetries) & '
        f'" infrastructure retries (fault_retries.max_retries)" : {deadline}) : '
        f'($faults.unknown >= {UNKNOWN_RETRIES} ? "an unknown failure is retried {UNKNOWN_RETRIES} time" : '
        f"{deadline})"
    )
    why = (
        f"({_CAPACITY_LIKE} ? {capacity} : "
        f'$outcome.status = "Failed" ? "Classified: " & {described_fault()} & ", " & ({not_retried}) & "." '
        ': "Not retried.")'
    )
    return (
        '$outcome.cause & ($substring($outcome.cause, -1) = "." ? " " : ". ") & '
        f"{why} & {earlier_retries()} & "
        '" Evaluation jobs tried: " & $string($attempt) & ". The model stays at " & $run.modelArtifacts & '
        '"; it is not registered."'
    )
