"""The registration machine's evaluation (model_registration.py): run each evaluation job in a child execution
of the pipeline's attempt machine, as training attempts run, and retry it for what the training attempts
retry (docs/registry.md, "Evaluation failures and retries").

Each evaluation job is one execution of `<project>-pipeline-attempt` (attempt/training_attempt.py, or in
queue mode attempt/queued_training_attempt.py: submitted to the Batch queue on the run's share with its
priority), so its polls stay in that child's history and the registration machine's grows by a few events
per job. The child's output is `$outcome` {"status", "cause", "job", "fault", "quota"}, and the pipeline's
retry decisions (fault_retries.py) apply unchanged to the machine's variables of the same names:
`$attempt` (the evaluation job's number, which names it: evaluation_request.EVALUATION_JOB_NAME), `$faults`,
`$retriedFaults`, `$backoffSeconds` and `$plan`: the profile's `retry` and `fault_retries` settings as the
pipeline's plan holds them (pipeline_input_rules.retry_settings, in the registry table), with both deadlines
at the evaluation's own start plus `retry.deadline_hours` (the run's deadline counts from before training):
- capacity (the fault table's capacity class, spot capacity that never came), a throttled CreateTrainingJob
  and a busy quota (trainstack.quota): a new evaluation job after the capacity back-off, while
  `retry.max_attempts` and the deadline allow. In queue mode Batch alone retries capacity (docs/queue.md):
  an evaluation job Batch gave up on is not submitted again; a busy quota is;
- an infrastructure fault: a new evaluation job after the `fault_retries` back-off, up to
  `fault_retries.max_retries`; an unknown failure: once (UNKNOWN_RETRIES), as for training;
- the run's cost cap (cost_cap_states.py): each job gets what the run has left of `max_cost_usd` and is
  stopped once its billed cost passes it; the machine ends `BudgetExceeded` then, or before a retry once the
  run's billed cost (training and evaluation) has reached the cap;
- anything else (a user error, a job that reports no evaluation metric, a request SageMaker or Batch rejects,
  an exceeded quota, a stopped or overdue job) and a spent budget: EvaluationFailed, its cause naming the
  last job, its reason, why it was not retried and how many evaluation jobs were tried.
"""

from __future__ import annotations

from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline import cost_cap_states
from stacks.pipeline.attempt.attempt_start import start_attempt
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
from stacks.pipeline.machine_kit import literal_partition
from stacks.pipeline.pipeline_input_rules import backoff_seconds_expression
from stacks.pipeline.quota_waits import QUOTA_STATUS
from stacks.pipeline.registry.evaluation_request import (
    EVALUATION_JOB_NAME,
    REPORTED_METRIC,
    evaluation_metrics,
)
from trainstack.faults import INFRASTRUCTURE, UNKNOWN_RETRIES, USER

EVALUATION_FAILED = "EvaluationFailed"
BUDGET_EXCEEDED = cost_cap_states.BUDGET_EXCEEDED_STATUS
# Queue mode: the run's Batch share and priority (queued_training_attempt.queue_attempt_fields).
_QUEUE_FIELDS = ("priority", "share")
_BUSY_QUOTA = f'($outcome.status = "{QUOTA_STATUS}" and $outcome.quota.busy = true)'


def _capacity_like(queued: bool) -> str:
    """Outcomes retried on the capacity budget: in queue mode only a busy quota (Batch retries capacity)."""
    if queued:
        return _BUSY_QUOTA
    return f'($outcome.status in ["Capacity", "Throttled"] or {_BUSY_QUOTA})'


def evaluation_states(
    scope: Construct,
    *,
    attempt_machine: sfn.StateMachine,
    request: str,
    queued: bool,
    completed: sfn.IChainable,
) -> sfn.IChainable:
    """From the first evaluation job to `completed` (a job reported the profile's metric into $evaluation,
    its name into $evaluationJob) or the machine's output {"status": "EvaluationFailed" | "BudgetExceeded",
    "cause"}. `request`: the evaluation job's CreateTrainingJob request (JSONata)."""
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
            # The run's cost cap and what its training billed (cost_cap_states: null and 0 without a cap).
            "costCap": expression("$exists($run.costCap) ? $run.costCap : null"),
            "spentUsd": expression("$exists($run.spentUsd) ? $run.spentUsd : 0"),
        },
    )
    run_job = start_attempt(
        scope,
        "RunEvaluationJob",
        comment="Evaluation job N, created (queue mode: submitted) and followed in an attempt execution.",
        attempt_machine=attempt_machine,
        name='"evaluation-" & $string($attempt) & "-" & $uuid()',
        attempt_input={
            "request": expression(request),
            "runName": expression("$run.runName"),
            # The run's time limit (maxRuntimeHours and the profile's allowances), from this job's start.
            "stopAtMillis": expression("$millis() + 1000 * $run.timeLimitSeconds"),
            "timeLimitSeconds": expression("$run.timeLimitSeconds"),
            **(
                {name: expression(f"$exists($run.{name}) ? $run.{name} : null") for name in _QUEUE_FIELDS}
                if queued
                else {}
            ),
            **cost_cap_states.attempt_input(),
        },
        assign={"outcome": expression("$states.result.Output"), **cost_cap_states.run_attempt_assign()},
    )
    over_budget = sfn.Succeed.jsonata(
        scope,
        "ReportEvaluationOverBudget",
        outputs=expression(f'{{"status": "{BUDGET_EXCEEDED}", "cause": {_over_budget_cause()}}}'),
    )
    failed = sfn.Succeed.jsonata(
        scope,
        "ReportEvaluationFailed",
        outputs=expression(f'{{"status": "{EVALUATION_FAILED}", "cause": {_failed_cause(queued)}}}'),
    )
    classify = _classify(scope, run_job, failed, queued)
    check = (
        sfn.Choice.jsonata(scope, "CheckEvaluation")
        .when(
            sfn.Condition.jsonata(expression(f'$outcome.status = "Completed" and {_METRIC_REPORTED}')),
            completed,
            assign={
                "evaluation": expression(evaluation_metrics()),
                "evaluationJob": expression("$outcome.job.name"),
            },
        )
        .when(sfn.Condition.jsonata(expression(cost_cap_states.budget_spent_condition())), over_budget)
        .otherwise(classify)
    )
    run_job.next(check)
    return plan.next(run_job)


# The profile's metric (evaluation loss unless it names its own) is in the job's FinalMetricDataList.
_METRIC_REPORTED = f'$type(($outcome.job.metrics)[MetricName = {REPORTED_METRIC}][0].Value) = "number"'


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


def _classify(scope: Construct, run_job: sfn.IChainable, failed: sfn.IChainable, queued: bool) -> sfn.Choice:
    """Another evaluation job after a back-off, on the capacity budget or the fault budget, or the end."""
    wait_before_retry = sfn.Wait.jsonata(
        scope, "WaitBeforeEvaluationRetry", time=sfn.WaitTime.seconds(expression("$backoffSeconds"))
    )
    wait_before_retry.next(run_job)
    return (
        sfn.Choice.jsonata(scope, "ClassifyEvaluation")
        .when(
            sfn.Condition.jsonata(expression(f"{_capacity_like(queued)} and {capacity_retry_allowed()}")),
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


def _outcome_cause() -> str:
    """The child's cause, as the evaluation's: which evaluation job, and what happened to it."""
    name = f"($exists($outcome.job.name) ? $outcome.job.name : {EVALUATION_JOB_NAME})"
    return (
        f'"Evaluation job " & {name} & ($outcome.status = "Completed" ? '
        f'" completed but reported no " & {REPORTED_METRIC} & " metric." : ": " & $outcome.cause)'
    )


def _kept_model() -> str:
    return (
        '" Evaluation jobs tried: " & $string($attempt) & ". The model stays at " & $run.modelArtifacts & '
        '"; it is not registered."'
    )


def _over_budget_cause() -> str:
    """BudgetExceeded: the job stopped for the cap, or the run's billed cost reached it before a retry."""
    spent, cap = cost_cap_states.money("$spentUsd"), cost_cap_states.money("$costCap.maxUsd")
    reached = (
        f'"The run\'s billed cost reached " & {spent} & ", the max_cost_usd of " & {cap} & " of profile " & '
        f'$run.profile & ", with its evaluation. " & {_outcome_cause()}'
    )
    return f'($outcome.status = "{BUDGET_EXCEEDED}" ? {_outcome_cause()} : {reached}) & {_kept_model()}'


def _failed_cause(queued: bool) -> str:
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
        f"({_capacity_like(queued)} ? {capacity} : "
        f'$outcome.status = "Failed" ? "Classified: " & {described_fault()} & ", " & ({not_retried}) & "." '
        ': "Not retried.")'
    )
    cause = _outcome_cause()
    return (
        f'({cause}) & ($substring({cause}, -1) = "." ? " " : ". ") & '
        f"{why} & {earlier_retries()} & {_kept_model()}"
    )
