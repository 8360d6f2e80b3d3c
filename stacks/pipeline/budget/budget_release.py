"""The release of a team's budget reservations (budget_table.py): `<namespace>-budget-release`, one JSONata
state machine started two ways:

- by the rule `OnRunEnded` for every ending of a pipeline execution (SUCCEEDED, FAILED, TIMED_OUT,
  ABORTED), with the event as input: that execution's reservation;
- by the rule `Sweep` every 15 minutes, with the scheduled event (no execution in it): every reservation
  whose execution is no longer RUNNING (a missed event, a failed release).

For each, DescribeExecution says how the run ended; a RUNNING one keeps its reservation. The release is one
UpdateItem, conditional on the reservation still being there (two releases of one run release it once):
it removes the reservation, takes 1 run and the run's instances off the counters, and trues the month's
reserved cost up to the billed cost the pipeline recorded after its last attempt, when the run ended
through its own states (SUCCEEDED or FAILED). A run stopped or timed out in an attempt has billed more
than was recorded: its month keeps the planned cost, on the safe side.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.budget.budget_table import MONTH_PREFIX, NAMES, RUN_PREFIX, BudgetTable
from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import (
    ENDED_UNSUCCESSFULLY,
    EXECUTION_GONE_ERROR,
    STEP_FUNCTIONS_ERROR,
    SWEEP_TIMEOUT,
    execution_prefix,
    execution_status_pattern,
    retry_must_succeed_call,
    start_every_sweep,
)
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, number
from stacks.validation import acknowledge

# Endings through the pipeline's own states: the billed cost recorded after the last attempt is the run's.
BILLED_IS_KNOWN = ("SUCCEEDED", "FAILED")


class BudgetRelease(Construct):
    """The release machine (`state_machine`) and its two rules."""

    def __init__(
        self, scope: Construct, construct_id: str, *, table: BudgetTable, pipeline: sfn.StateMachine
    ) -> None:
        super().__init__(scope, construct_id)
        self._table = table
        executions = f"{execution_prefix(self, pipeline)}*"
        self.state_machine, _ = logged_state_machine(
            self,
            "StateMachine",
            name=f"{table.namespace}-budget-release",
            chain=self._release(executions),
            timeout=SWEEP_TIMEOUT,
        )
        table.only_own_item(self.state_machine.role)
        ended = events.Rule(
            self,
            "OnRunEnded",
            description=f"Release the budget reservation of each {table.namespace} run that ends",
            event_pattern=execution_status_pattern(pipeline, ("SUCCEEDED", *ENDED_UNSUCCESSFULLY)),
        )
        ended.add_target(targets.SfnStateMachine(self.state_machine))
        start_every_sweep(
            self,
            self.state_machine,
            f"Release the budget reservations of {table.namespace} runs that are no longer running",
        )
        acknowledge(
            self.state_machine.role,
            f"AwsSolutions-IAM5[Resource::{cdk.Stack.of(self).resolve(executions)}]",
            "The executions are found at run time; all are the team's pipeline's.",
        )
        acknowledge(
            self.state_machine.role,
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery and X-Ray actions support no resource-level permissions.",
        )

    def _release(self, executions: str) -> sfn.IChainable:
        """Input: an execution's end event, or the scheduled event. Output: {"released": [execution ARNs]}."""
        read = self._table.call(
            self,
            "ReadReservations",
            "getItem",
            {"ConsistentRead": True},
            assign={
                # Each reservation to look at: {execution, claim}; the event's execution, or every one.
                "candidates": expression(
                    f'($item := $states.result.Item; $p := "{RUN_PREFIX}"; '
                    "$event := $states.input.detail.executionArn; $arns := $exists($event) ? [$event] "
                    ": $map($filter($keys($item), function($k) {$substring($k, 0, $length($p)) = $p}), "
                    "function($k) {$substring($k, $length($p))}); "
                    "$filter($map($arns, function($a) {{'execution': $a, "
                    "'claim': $lookup($item, $p & $a).M}}), "
                    "function($c) {$exists($c.claim)}) ~> $append([]))"
                ),
            },
        )
        each = sfn.Map.jsonata(
            self,
            "ReleaseEnded",
            items=sfn.ProvideItems.jsonata(expression("$candidates")),
            max_concurrency=1,
            assign={
                "released": expression(
                    "$append([], $filter($states.result, function($v) {$type($v) = 'string'}))"
                )
            },
        )
        describe = tasks.CallAwsService.jsonata(
            self,
            "ReadRunExecution",
            service="sfn",
            action="describeExecution",
            parameters={"ExecutionArn": expression("$states.input.execution")},
            iam_resources=[executions],
            iam_action="states:DescribeExecution",
            assign={"run": expression("$states.input"), "ended": expression("$states.result.Status")},
            outputs={},
        )
        retry_must_succeed_call(describe, [STEP_FUNCTIONS_ERROR])
        keep = sfn.Pass.jsonata(self, "KeepReservation", outputs=expression("null"))
        release = self._release_one()
        describe.add_catch(
            release,
            errors=[EXECUTION_GONE_ERROR],
            assign={"run": expression("$states.input"), "ended": "GONE"},
        )
        release.add_catch(keep, errors=[CONDITION_FAILED])  # released meanwhile
        each.item_processor(
            describe.next(
                sfn.Choice.jsonata(self, "IsRunLive")
                .when(sfn.Condition.jsonata(expression("$ended = 'RUNNING'")), keep)
                .otherwise(release)
            )
        )
        done = sfn.Succeed.jsonata(self, "Released", outputs={"released": expression("$released")})
        return read.next(each).next(done)

    def _release_one(self) -> sfn.TaskStateBase:
        claim = "$run.claim"
        planned = f"$number({claim}.plannedUsd.N)"
        charged = (
            f"($ended in {literal(BILLED_IS_KNOWN)} and $exists({claim}.billedUsd)) "
            f"? $number({claim}.billedUsd.N) : {planned}"
        )
        return self._table.call(
            self,
            "ReleaseReservation",
            "updateItem",
            {
                "UpdateExpression": "REMOVE #run "
                "ADD #runs :lessOne, #instances :lessInstances, #month :trueUp",
                "ConditionExpression": "attribute_exists(#run)",
                "ExpressionAttributeNames": {
                    **NAMES,
                    "#run": expression(f'"{RUN_PREFIX}" & $run.execution'),
                    "#month": expression(f'"{MONTH_PREFIX}" & {claim}.month.S'),
                },
                "ExpressionAttributeValues": {
                    ":lessOne": {"N": "-1"},
                    ":lessInstances": number(f"-$number({claim}.instances.N)"),
                    ":trueUp": number(f"({charged}) - {planned}"),
                },
            },
            outputs=expression("$run.execution"),
        )
