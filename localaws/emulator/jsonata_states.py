"""moto's JSONata evaluation replaced by AWS's engine (jsonata_engine.py).

moto writes every variable and `$states` into the expression text as `$name:=<JSON>;` and parses the
result again at each evaluation, through a hook it leaves empty; it evaluates once more to tell null from
nothing. Here each `{% %}` expression is evaluated once, compiled once per text, with the variables it
names passed as bindings, at the instant of the emulator's clock. An evaluation that fails, or gives
nothing, fails the state with States.QueryEvaluationError (catchable), as on AWS, where moto raised an
uncatchable States.Runtime.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any
from unittest import mock

from localaws.emulator.clock import Clock
from localaws.emulator.jsonata_engine import JsonataError, evaluate
from localaws.emulator.timestamps import aws_timestamp

# $states' members an expression can name, each bound only where the expression names it (moto's rule).
_STATES_MEMBERS = ("input", "context", "result", "errorOutput")


# A `$name` anywhere in the text, and `$states` with the member it reads. moto's own extraction
# (extract_jsonata_variable_references) is not used for this: it takes the text between two division
# operators (`$a / 1000 ... $b / 3600`) for a regex literal and drops the variables in it, which AWS binds.
# Binding a variable the text only seems to name (in a string, or shadowed by a local `:=`) changes nothing.
_NAME = re.compile(r"\$([A-Za-z0-9_]+)")
_STATES_MEMBER = re.compile(r"\$states\s*\.\s*([A-Za-z]+)")
_STATES_WHOLE = re.compile(r"\$states\b(?!\s*\.\s*[A-Za-z])")


@cache
def _names(expression: str) -> tuple[frozenset[str], frozenset[str]]:
    """The variables the expression names (without `$`) and the $states members it reads (all of them
    where it names `$states` itself). Raises moto's IllegalJSONataVariableReference for `$` and `$$`."""
    from moto.stepfunctions.parser.asl.jsonata.jsonata import extract_jsonata_variable_references

    extract_jsonata_variable_references(expression)  # moto's refusal of `$` and `$$`
    names = frozenset(_NAME.findall(expression))
    if _STATES_WHOLE.search(expression):
        members = frozenset(_STATES_MEMBERS)
    else:
        members = frozenset(_STATES_MEMBER.findall(expression)) & frozenset(_STATES_MEMBERS)
    return names - {"states"}, members


def _bindings(env, expression: str, with_states: bool) -> dict[str, Any]:
    from moto.stepfunctions.parser.asl.eval.variable_store import NoSuchVariable

    names, members = _names(expression)
    bindings: dict[str, Any] = {}
    for name in names:
        try:
            bindings[name] = env.variable_store.get(name)
        except NoSuchVariable:
            pass  # a function ($string) or a variable the expression binds itself
    if with_states and members:
        states = env.states._states_data
        bindings["states"] = {member: states[member] for member in members if member in states}
    return bindings


def _query_evaluation_error(env, cause: str, *, record: bool):
    from moto.stepfunctions.parser.api import EvaluationFailedEventDetails, HistoryEventType
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
    details = EvaluationFailedEventDetails(error=name.error_name, cause=cause)
    if record:  # as moto's own check of the result records it (asl/jsonata/validations.py)
        env.event_manager.add_event(
            context=env.event_history_context,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(evaluationFailedEventDetails=details),
        )
    return FailureEventException(
        FailureEvent(
            env=env,
            error_name=name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(evaluationFailedEventDetails=details),
        )
    )


def _evaluator(clock: Clock, *, whole_expression: bool):
    """`_eval_body` of moto's StringJSONata (a `{% %}` expression: its result checked) and of its
    StringVariableSample (a `$variable.path` in a JSONPath or JSONata field: nothing gives null, as in
    moto)."""
    from moto.stepfunctions.parser.asl.component.common.query_language import QueryLanguageMode
    from moto.stepfunctions.parser.asl.jsonata.jsonata import IllegalJSONataVariableReference

    def eval_body(self, env) -> None:
        with_states = whole_expression or self.query_language_mode == QueryLanguageMode.JSONata
        try:
            outcome = evaluate(
                self.expression, _bindings(env, self.expression, with_states), millis=clock.millis()
            )
        except (JsonataError, IllegalJSONataVariableReference) as error:
            raise _query_evaluation_error(
                env, f"An error occurred while executing the state: {error}", record=False
            ) from error
        if not whole_expression:
            env.stack.append(outcome.value)
            return
        if outcome.undefined:
            raise _query_evaluation_error(
                env, f"The JSONata expression '{self.expression}' returned nothing (undefined).", record=True
            )
        if outcome.unsupported:
            raise _query_evaluation_error(
                env,
                f"The JSONata expression '{self.expression}' returned an unsupported result type.",
                record=True,
            )
        env.stack.append(outcome.value)

    return eval_body


def _state_data_with_aws_entered_time(**fields) -> dict:
    """moto's StateData, with EnteredTime as AWS writes it (timestamps.py)."""
    from datetime import datetime

    return {**fields, "EnteredTime": aws_timestamp(datetime.fromisoformat(fields["EnteredTime"]))}


def patches(clock: Clock) -> list[Any]:
    from moto.stepfunctions.parser.asl.component.common.string import string_expression
    from moto.stepfunctions.parser.asl.component.state import state

    return [
        mock.patch.object(
            string_expression.StringJSONata, "_eval_body", _evaluator(clock, whole_expression=True)
        ),
        mock.patch.object(
            string_expression.StringVariableSample, "_eval_body", _evaluator(clock, whole_expression=False)
        ),
        mock.patch.object(state, "StateData", _state_data_with_aws_entered_time),
    ]
