"""The training pipeline's Step Functions state machines (JSONata): the pipeline and one attempt of it.

The pipeline: check the input (the rules of trainstack.input_rules, in JSONata), build the run's
CreateTrainingJob request from the profile's base request (trainstack.job_request, applied with
$merge), run attempt after attempt in the attempt machine (attempt/training_attempt.py), wait with
capped, jittered backoff between attempts that found no capacity, until the profile's max_attempts or
its retry deadline (wall clock, from the execution's start time), retry attempts that failed for the
infrastructure's fault on the profile's fault budget (fault_retries.py), and report the result.
Errors: InvalidInput, CapacityExhausted, QuotaExceeded, InfrastructureRetriesExhausted, TrainingFailed,
TrainingStopped, BudgetExceeded (cost_cap_states.py), EvaluationFailed (a Completed run of a profile
with `registry:` is evaluated: registry/).
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline import cost_cap_states, quota_waits
from stacks.pipeline.attempt.attempt_start import start_attempt
from stacks.pipeline.attempt.queued_training_attempt import QueuedTrainingAttempt, queue_attempt_fields
from stacks.pipeline.attempt.training_attempt import TrainingAttempt
from stacks.pipeline.attempt_grants import DESCRIBE_BATCH_JOBS, grant_attempt_role
from stacks.pipeline.attempt_metrics import grant_publish, publish_attempt_metrics
from stacks.pipeline.budget import reservation_states
from stacks.pipeline.budget.budget_release import BudgetRelease
from stacks.pipeline.budget.budget_table import budget_table
from stacks.pipeline.checkpoint_interval import refined_request
from stacks.pipeline.fault_retries import (
    NO_FAULTS_YET,
    capacity_attempts,
    capacity_retry_allowed,
    fault_retry_assignments,
    fault_retry_condition,
    infrastructure_exhausted_cause,
    infrastructure_exhausted_condition,
    training_failed_cause,
)
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import literal_partition, training_job_arn
from stacks.pipeline.pipeline_input_rules import (
    backoff_seconds_expression,
    check_input_expression,
    profile_table,
)
from stacks.pipeline.pipeline_run_request import (
    attempt_fields_expression,
    checkpoint_location_expression,
    code_digest_expression,
    plan_expression,
    request_expression,
)
from stacks.pipeline.plan_endings import add_plan_ending_branches, plan_start_assignments
from stacks.pipeline.queue.training_queue import TrainingQueue, batch_training_jobs
from stacks.pipeline.registry.model_registration import ModelRegistration
from stacks.pipeline.request_guard import allowed_requests
from stacks.pipeline.state_machine_facts import (
    ERROR_CAPACITY_EXHAUSTED,
    ERROR_INFRASTRUCTURE_RETRIES_EXHAUSTED,
    ERROR_INVALID_INPUT,
    ERROR_QUOTA_EXCEEDED,
    ERROR_TRAINING_FAILED,
    ERROR_TRAINING_STOPPED,
    execution_timeout_seconds,
    resource_value,
    substitution_names,
    with_placeholders,
)
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.job_request import PipelineResources
from trainstack.pipeline_runs import PipelineRuns


class TrainingStateMachine(Construct):
    """The pipeline (`state_machine`) and its attempt machine (`attempt_machine`), both STANDARD."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runs: PipelineRuns,
        resources: PipelineResources,
        sagemaker_role: iam.IRole,
        image_repository_arn: str,
        queue: TrainingQueue | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        project, profiles = runs.project, runs.profiles
        if not profiles:
            raise ValueError("the pipeline needs at least one profile under profiles: in the config")
        placeholders = with_placeholders(resources)
        self.substitutions: Mapping[str, str] = {
            name: resource_value(resources, path) for name, path in substitution_names(resources).items()
        }
        job_arn = training_job_arn(self, f"{project}-*")
        self.queue = queue
        # What the attempt machine checks each request against (request_guard.py), placeholders included.
        allowed = allowed_requests(runs, placeholders)
        attempt = self._attempt_chain(job_arn, allowed)
        self.attempt_machine, self.attempt_log_group = logged_state_machine(
            self, "AttemptStateMachine", name=f"{project}-pipeline-attempt", chain=attempt, timeout=None
        )
        # teams[].budget: the team's reservations, taken before the first attempt (budget/).
        self.budget = (
            budget_table(self, project, runs.team, runs.budget)
            if runs.budget is not None and runs.team is not None
            else None
        )
        self.registration = ModelRegistration(
            self,
            "Registration",
            runs,
            resources,
            sagemaker_role,
            attempt_machine=self.attempt_machine,
            queued=queue is not None,
            image_repository_arn=image_repository_arn,
        )
        chain = self._pipeline(runs, placeholders)
        self.state_machine, self.log_group = logged_state_machine(
            self,
            "StateMachine",
            name=f"{project}-pipeline",
            chain=chain,
            timeout=cdk.Duration.seconds(execution_timeout_seconds(profiles)),
        )
        self._substitute(self.state_machine)
        self._substitute(self.attempt_machine)
        if self.budget is not None:
            self.budget.only_own_item(self.state_machine.role)
            self.budget_release = BudgetRelease(
                self, "BudgetRelease", table=self.budget, pipeline=self.state_machine
            )
        acknowledge_wildcard_statements(
            self.state_machine.role,
            {
                "states:DescribeExecution": "StartExecution.sync follows the attempt executions it starts; "
                "their names are generated at run time under the attempt machine's name."
            },
        )
        grant_attempt_role(self.attempt_machine, self.queue, job_arn, sagemaker_role, runs, resources)
        grant_publish(self.state_machine.role, project)
        for machine in (self.state_machine, self.attempt_machine):
            acknowledge(
                machine.role,
                "AwsSolutions-IAM5[Resource::*]",
                "CloudWatch Logs delivery and X-Ray actions, added by CDK for logging and tracing, and the "
                "pipeline's cloudwatch:PutMetricData (scoped by its namespace condition) support no "
                "resource-level permissions.",
            )

    def _attempt_chain(self, job_arn: str, allowed: dict) -> sfn.IChainable:
        """The attempt machine's states: the direct attempt, or in queue mode the queued one."""
        queue = self.queue
        if queue is None:
            return TrainingAttempt(
                self, "Attempt", partition=literal_partition(self), job_arn=job_arn, allowed=allowed
            ).start
        return QueuedTrainingAttempt(
            self,
            "Attempt",
            partition=literal_partition(self),
            job_queue_arn=queue.job_queue_arn,
            queue_name=queue.queue_name,
            job_arns=[job_arn],
            service_job_arn=queue.service_job_arn,
            batch_job_permissions=[
                batch_training_jobs(
                    self, queue.queue_name, DESCRIBE_BATCH_JOBS, ["sagemaker:DescribeTrainingJob"]
                )
            ],
            run_names=queue.run_names,
            allowed=allowed,
        ).start

    def _substitute(self, machine: sfn.StateMachine) -> None:
        resource = machine.node.default_child
        assert isinstance(resource, sfn.CfnStateMachine)
        resource.definition_substitutions = dict(self.substitutions)

    def _pipeline(self, runs: PipelineRuns, resources: PipelineResources) -> sfn.IChainable:
        read_input = sfn.Pass.jsonata(
            self,
            "ReadInput",
            comment="The profiles: each one's CreateTrainingJob base request and retry policy.",
            # As a JSONata literal: moto's ASL parser keeps JSON escapes of plain Assign values (a
            # MetricDefinitions regex "\\." would reach SageMaker as "\\\\."); JSONata reads them as AWS does.
            assign={"profiles": expression(literal(profile_table(runs.profiles, resources)))},
        )
        check_input = sfn.Pass.jsonata(
            self, "CheckInput", assign={"checked": expression(check_input_expression(runs))}
        )
        invalid_input = sfn.Fail.jsonata(
            self, "InvalidInput", error=ERROR_INVALID_INPUT, cause=expression("$checked.problem")
        )
        prepare_run = self._prepare_run(resources, runs.project)
        run_attempt = self._run_attempt(runs, resources)
        classify = self._classify_attempt(run_attempt)
        publish = publish_attempt_metrics(
            self, "PublishAttemptMetrics", project=runs.project, partition=literal_partition(self)
        )
        # Metrics are a side effect: a failed publish never changes the run's outcome.
        publish.add_catch(classify, errors=["States.ALL"], outputs={})
        after_attempt: sfn.IChainable = publish
        if self.budget is not None:
            record = reservation_states.record_billed_cost(self, self.budget)
            record.add_catch(publish, errors=["States.ALL"], outputs={})  # a side effect, like the metrics
            after_attempt = record.next(publish)
        run_attempt.next(after_attempt)
        publish.next(classify)
        run = (
            prepare_run.next(reservation_states.reserve_budget(self, self.budget, run_attempt))
            if self.budget is not None
            else prepare_run.next(run_attempt)
        )
        valid = (
            sfn.Choice.jsonata(self, "IsInputValid")
            .when(sfn.Condition.jsonata(expression("$checked.problem != null")), invalid_input)
            .otherwise(run)
        )
        return read_input.next(check_input).next(valid)

    def _prepare_run(self, resources: PipelineResources, project: str) -> sfn.Pass:
        return sfn.Pass.jsonata(
            self,
            "PrepareRun",
            comment="The run's request (profile base request + run fields) and its limits; attempt 1.",
            assign={
                "request": expression(request_expression(resources, project)),
                "plan": expression(plan_expression()),
                "attempt": 1,
                "trainingJobs": expression("[]"),  # every training job the run's attempts started, by name
                "faults": expression(NO_FAULTS_YET),
                "retriedFaults": expression("[]"),
                **quota_waits.quota_start_assignments(),
                **plan_start_assignments(),
                # The table and the raw input are not needed any more (every expression reads all variables).
                "profiles": expression("null"),
                "checked": expression("null"),
                **cost_cap_states.prepare_run_assign(),
                **(reservation_states.prepare_run_assign() if self.budget is not None else {}),
            },
        )

    def _run_attempt(self, runs: PipelineRuns, resources: PipelineResources) -> sfn.TaskStateBase:
        return start_attempt(
            self,
            "RunAttempt",
            comment="Attempt N creates and follows job <runName>-N; every attempt shares the checkpoint URI.",
            attempt_machine=self.attempt_machine,
            name='"attempt-" & $string($attempt) & "-" & $uuid()',
            attempt_input={
                "request": expression(quota_waits.attempt_request(attempt_fields_expression(resources))),
                "runName": expression("$plan.runName"),
                "stopAtMillis": expression("$plan.stopAtMillis"),
                "timeLimitSeconds": expression("$plan.timeLimitSeconds"),
                **(queue_attempt_fields(runs.profiles, runs.queue) if self.queue else {}),
                **cost_cap_states.attempt_input(),
            },
            assign={
                "outcome": expression("$states.result.Output"),
                # Queue mode's attempt names each job Batch started (job.trainingJobs); a direct one its job,
                # when there was one (described: it has an instanceType; a refused create made none).
                "trainingJobs": expression(
                    "$append($trainingJobs, ($j := $states.result.Output.job; "
                    "$j.trainingJobs ? $j.trainingJobs : $j.instanceType ? $j.name))"
                ),
                **refined_request(runs.profiles),
                **cost_cap_states.run_attempt_assign(),
            },
        )

    def _classify_attempt(self, run_attempt: sfn.IChainable) -> sfn.Choice:
        """How the attempt ended: the run succeeded, another attempt after a wait, or the run fails."""
        attempts = capacity_attempts()
        no_capacity = _status_in("Capacity", "Throttled")
        capacity_exhausted = self._capacity_exhausted()
        wait_before_retry = sfn.Wait.jsonata(
            self, "WaitBeforeRetry", time=sfn.WaitTime.seconds(expression("$backoffSeconds"))
        )
        classify = sfn.Choice.jsonata(self, "ClassifyAttempt").when(
            sfn.Condition.jsonata(expression(_status_in("Completed"))), self._succeeded()
        )
        quota_waits.add_quota_branches(classify, run_attempt, wait_before_retry, capacity_exhausted)
        add_plan_ending_branches(self, classify, run_attempt, quota_waits.preferences_left())
        cost_cap_states.add_budget_exceeded(self, classify)
        # Queue mode: Batch alone retries capacity errors (docs/queue.md); the pipeline never stacks its own.
        if self.queue is None:
            classify.when(
                sfn.Condition.jsonata(expression(f"{no_capacity} and {capacity_retry_allowed()}")),
                wait_before_retry,
                assign={
                    "attempt": expression("$attempt + 1"),
                    "backoffSeconds": expression(backoff_seconds_expression("$plan.backoff", attempts)),
                    **quota_waits.busy_types_back(),
                },
            )
        # Faults are the pipeline's to retry in both modes (each retry is a new job, or service job).
        classify.when(
            sfn.Condition.jsonata(expression(fault_retry_condition())),
            wait_before_retry,
            assign={name: expression(value) for name, value in fault_retry_assignments().items()},
        )
        wait_before_retry.next(run_attempt)
        classify.when(sfn.Condition.jsonata(expression(no_capacity)), capacity_exhausted)
        failures = (
            (_status_in("Quota"), "QuotaExceeded", ERROR_QUOTA_EXCEEDED, quota_waits.quota_exceeded_cause()),
            (
                _status_in("Rejected", "NameInUse"),
                "RejectedBySageMaker",
                ERROR_INVALID_INPUT,
                "$outcome.cause",
            ),
            (
                infrastructure_exhausted_condition(),
                "InfrastructureRetriesExhausted",
                ERROR_INFRASTRUCTURE_RETRIES_EXHAUSTED,
                infrastructure_exhausted_cause(),
            ),
            (_status_in("Failed"), "TrainingFailed", ERROR_TRAINING_FAILED, training_failed_cause()),
        )
        for condition, state_id, error, cause in failures:
            classify.when(
                sfn.Condition.jsonata(expression(condition)),
                sfn.Fail.jsonata(self, state_id, error=error, cause=expression(cause)),
            )
        return classify.otherwise(
            sfn.Fail.jsonata(
                self, "TrainingStopped", error=ERROR_TRAINING_STOPPED, cause=expression("$outcome.cause")
            )
        )

    def _succeeded(self) -> sfn.IChainable:
        succeeded = sfn.Succeed.jsonata(
            self,
            "Succeeded",
            outputs={
                "trainingJobName": expression("$outcome.job.name"),
                "instanceType": expression("$outcome.job.instanceType"),
                "instanceCount": expression("$outcome.job.instanceCount"),
                "modelArtifacts": expression("$outcome.job.artifacts"),
                "checkpointUri": expression(checkpoint_location_expression("$request")),
                # The team's own code the run ran (trainstack.team_code); null: the image's entry point.
                "codeDigest": expression(code_digest_expression("$request")),
                "attempts": expression("$attempt"),
                "retriedFaults": expression("$retriedFaults"),
                "quotaWaits": expression("$quotaWaits"),
                "modelPackage": expression("$registered"),
            },
        )
        return self.registration.after(self, succeeded)

    def _capacity_exhausted(self) -> sfn.Fail:
        attempts = capacity_attempts()
        retries_cause = (
            f'($last := "; last job " & $plan.runName & "-" & $string($attempt) & ": " & $outcome.cause; '
            f"{attempts} >= $plan.maxAttempts "
            f'? "No capacity after " & $string({attempts}) & " attempts (profile " & $plan.profile '
            '& " allows " '
            '& $string($plan.maxAttempts) & ")" & $last '
            ': "No capacity within the retry deadline of " & $string($plan.deadlineSeconds) & " seconds '
            f'(profile " & $plan.profile & ") after " & $string({attempts}) & " attempts" & $last)'
        )
        return sfn.Fail.jsonata(
            self,
            "CapacityExhausted",
            error=ERROR_CAPACITY_EXHAUSTED,
            cause=expression(quota_waits.capacity_exhausted_cause(retries_cause, queued=bool(self.queue))),
        )


def _status_in(*statuses: str) -> str:
    return f"$outcome.status in {literal(list(statuses))}"
