"""The debounce: every object-created event under the prefix is one short execution of the trigger machine
that records the event in the profile's item; the first one while no execution watches the profile becomes
its controller (a conditional write: at most one per profile). The controller sleeps until the prefix has
been quiet for quiet_minutes, or max_delay_hours after the window's first event, then closes the window
and runs (triggered_run.py). Nothing polls: each Wait lasts until the next moment the window could close.

Item attributes (numbers are epoch milliseconds): firstEventMillis, lastEventMillis, pendingEvents,
lastEventKey (the open window); controller, controllerUntil (the execution that watches the profile and
the end of its lease: the machine's timeout, so a controller that died frees the profile).
"""

from __future__ import annotations

from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.trigger.trigger_calls import CONDITION_FAILED, TriggerTable, lease, number, text
from stacks.pipeline.trigger.triggered_run import ERROR_TRIGGER_STATE_FAILED, caught
from trainstack.trigger_settings import RetrainOnNewData

_FIRST = "$number($window.firstEventMillis.N)"
_LAST = "$number($window.lastEventMillis.N)"


def window_closes_at(trigger: RetrainOnNewData) -> str:
    """JSONata: when the open window in $window closes (quiet after its last event, or its deadline)."""
    quiet, longest = trigger.quiet_minutes * 60_000, round(trigger.max_delay_hours * 3_600_000)
    return f"$min([{_LAST} + {quiet}, {_FIRST} + {longest}])"


class Debounce:
    """`start`: the machine's first state; `closed`: where a closed window goes on."""

    def __init__(
        self,
        scope: Construct,
        *,
        table: TriggerTable,
        trigger: RetrainOnNewData,
        lease_seconds: int,
        closed: sfn.IChainable,
        release: sfn.IChainable,
    ) -> None:
        """`release`: where any error of the controller's own calls goes (the profile freed, the window
        left in the item for the next upload's execution)."""
        self.scope, self.table, self.trigger, self.lease_seconds = scope, table, trigger, lease_seconds
        read = table.read("ReadWindow", "window")
        record = self._record_event()
        become = table.update(
            "BecomeController",
            "SET controller = :me, controllerUntil = :until",
            {**lease(self.lease_seconds), ":now": number("$millis()")},
            # A controller that died (aborted, timed out) loses the profile when its lease ends.
            condition="attribute_not_exists(controller) OR controllerUntil < :now",
        )
        take_over = table.update(
            "TakeOver",
            "SET controller = :me, controllerUntil = :until",
            {**lease(self.lease_seconds), ":previous": text("$states.input.after")},
            condition="controller = :previous",
        )
        watched = sfn.Succeed.jsonata(
            scope,
            "EventRecorded",
            comment="Another execution controls this profile's window: it sees this event.",
            outputs={
                "recorded": expression("$eventKey"),
                "decision": "recorded; the profile's controller execution will see it",
            },
        )
        become.add_catch(watched, errors=[CONDITION_FAILED], outputs={})
        lost = sfn.Succeed.jsonata(
            scope,
            "ControllerLost",
            comment="The handing-over execution's lease ran out and another execution took the profile.",
            outputs={"decision": "another execution controls this profile"},
        )
        take_over.add_catch(lost, errors=[CONDITION_FAILED], outputs={})
        handover = sfn.Choice.jsonata(scope, "IsHandover").when(
            sfn.Condition.jsonata(expression("$states.input.handover = true")), take_over.next(read)
        )
        handover.otherwise(record.next(become.next(read)))
        empty = self._let_go_empty(read)
        close = self._close(read, closed)
        read.next(self._window_choice(read, close, empty))
        for state in (read, close, empty):
            state.add_catch(
                release,
                errors=["States.ALL"],
                outputs={},
                assign=caught(ERROR_TRIGGER_STATE_FAILED, '"Could not read or close the window"'),
            )
        self.start = handover

    def _record_event(self) -> sfn.IChainable:
        return self.table.update(
            "RecordEvent",
            "SET lastEventMillis = :now, firstEventMillis = if_not_exists(firstEventMillis, :now), "
            "lastEventKey = :key ADD pendingEvents :one",
            {
                ":now": number("$millis()"),
                ":key": text("$states.input.detail.object.key"),
                ":one": {"N": "1"},
            },
            assign={"eventKey": expression("$states.input.detail.object.key")},
        )

    def _let_go_empty(self, read: sfn.IChainable) -> sfn.IChainable:
        """A handed-over controller that finds no open window lets go, unless an event just opened one."""
        let_go = self.table.update(
            "LetGoWithoutWindow",
            "REMOVE controller",
            condition="attribute_not_exists(firstEventMillis)",
        )
        let_go.add_catch(read, errors=[CONDITION_FAILED], outputs={})
        let_go.next(
            sfn.Succeed.jsonata(
                self.scope, "NoNewData", outputs={"decision": "no new data since the last run"}
            )
        )
        return let_go

    def _close(self, read: sfn.IChainable, closed: sfn.IChainable) -> sfn.TaskStateBase:
        close = self.table.update(
            "CloseWindow",
            "REMOVE firstEventMillis, lastEventMillis, pendingEvents",
            {":seen": {"N": expression("$window.lastEventMillis.N")}},
            condition="lastEventMillis = :seen",
            assign={
                "window": expression(
                    '{"firstEventMillis": $number($window.firstEventMillis.N), '
                    '"lastEventMillis": $number($window.lastEventMillis.N), '
                    '"events": $number($window.pendingEvents.N), "lastEventKey": $window.lastEventKey.S, '
                    '"lastHash": $window.lastHash.S, "lastHashRun": $window.lastHashRun.S}'
                )
            },
        )
        # An event that arrived since ReadWindow moved the window on: look again.
        close.add_catch(read, errors=[CONDITION_FAILED], outputs={})
        close.next(closed)
        return close

    def _window_choice(
        self, read: sfn.IChainable, close: sfn.IChainable, empty: sfn.IChainable
    ) -> sfn.Choice:
        wait = sfn.Wait.jsonata(
            self.scope,
            "WaitForQuiet",
            comment="Until the window could close: quiet_minutes after its last event, or its deadline.",
            time=sfn.WaitTime.seconds(
                expression(f"$max([1, $ceil(({window_closes_at(self.trigger)} - $millis()) / 1000)])")
            ),
        )
        return (
            sfn.Choice.jsonata(self.scope, "IsWindowClosed")
            .when(sfn.Condition.jsonata(expression("$not($exists($window.firstEventMillis))")), empty)
            .when(sfn.Condition.jsonata(expression(f"$millis() >= {window_closes_at(self.trigger)}")), close)
            .otherwise(wait.next(read))
        )
