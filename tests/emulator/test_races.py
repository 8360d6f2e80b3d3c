"""Races between threads of the emulator, forced: an ending child execution read by its parent's `.sync:2`
poll, a stopped parent's child, the SteppedClock's settling while many `.sync` tasks wait, and a local
training job described while its supervisor records its end, and DynamoDB updates of one item at once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from unittest import mock

import boto3
import pytest
from moto import mock_aws
from moto.core.responses import ActionResult
from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.responses import StepFunctionResponse

from localaws.emulator import ScaledClock, SteppedClock, VirtualClock, local_stepfunctions
from localaws.sagemaker.local_processes import LocalRun
from localaws.sagemaker.training_jobs import TrainingJob
from tests.emulator.machines import parent_of_child

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/states-test"
HOLD_SECONDS = 5.0  # real seconds an ending field waits for a DescribeExecution (bounded: never hangs)


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)


def emulating(clock):
    stack = ExitStack()
    stack.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
    stack.enter_context(local_stepfunctions(clock))
    return stack


def machine(states: dict) -> str:
    definition = {"QueryLanguage": "JSONata", "StartAt": next(iter(states)), "States": states}
    return boto3.client("stepfunctions").create_state_machine(
        name=f"m-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=ROLE_ARN
    )["stateMachineArn"]


def start(state_machine_arn: str, name: str) -> str:
    return boto3.client("stepfunctions").start_execution(
        stateMachineArn=state_machine_arn, name=name, input="{}"
    )["executionArn"]


def ended(execution_arn: str, timeout: float = 60) -> dict:
    client = boto3.client("stepfunctions")
    deadline = time.monotonic() + timeout
    while (described := client.describe_execution(executionArn=execution_arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"{execution_arn} still RUNNING"
        time.sleep(0.02)
    return described


def parent_of(child_arn: str) -> str:
    """A parent that starts the child with .sync:2 and returns what it read: the child's output, or the
    error its Cause (the child's DescribeExecution answer) names."""
    return machine(
        {
            "Child": {
                "Type": "Task",
                "Resource": "arn:aws:states:::states:startExecution.sync:2",
                "Arguments": {"StateMachineArn": child_arn, "Name": "child-1"},
                "Output": {"read": "{% $states.result.Output %}"},
                "Catch": [
                    {
                        "ErrorEquals": ["States.ALL"],
                        "Output": {"childError": "{% $parse($states.errorOutput.Cause).Error %}"},
                        "Next": "Caught",
                    }
                ],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        }
    )


class ReadBeforeWritten:
    """An ending child's output/error/cause whose assignment waits until its parent has read the child
    once more (a DescribeExecution answered): the interleaving a loaded machine produces by chance."""

    described: dict[str, int] = {}
    condition = threading.Condition()
    torn: list[dict] = []  # DescribeExecution answers of an ended child missing a field of its end

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, execution, owner=None):
        return self if execution is None else execution.__dict__.get(self.name)

    def __set__(self, execution, value) -> None:
        if value is not None and execution.name == "child-1":
            with self.condition:
                seen = self.described.get(execution.exec_arn, 0)
                self.condition.wait_for(
                    lambda: self.described.get(execution.exec_arn, 0) > seen, timeout=HOLD_SECONDS
                )
        execution.__dict__[self.name] = value

    @classmethod
    def install(cls, monkeypatch) -> None:
        describe = StepFunctionResponse.describe_execution

        def counted_describe(response):
            answer = describe(response).result
            status = answer["status"]
            missing = (status == "SUCCEEDED" and "output" not in answer) or (
                status == "FAILED" and not ("error" in answer and "cause" in answer)
            )
            with cls.condition:
                if missing:
                    cls.torn.append(dict(answer))
                arn = answer["executionArn"]
                cls.described[arn] = cls.described.get(arn, 0) + 1
                cls.condition.notify_all()
            return ActionResult(answer)

        monkeypatch.setattr(StepFunctionResponse, "describe_execution", counted_describe)
        for name in ("output", "error", "cause"):
            monkeypatch.setattr(Execution, name, cls(name), raising=False)
        cls.described.clear()
        cls.torn.clear()


@pytest.mark.parametrize(
    ("child_states", "parent_output"),
    [
        ({"Done": {"Type": "Pass", "Output": {"loss": 2.5}, "End": True}}, {"read": {"loss": 2.5}}),
        ({"Boom": {"Type": "Fail", "Error": "ChildFailed", "Cause": "why"}}, {"childError": "ChildFailed"}),
    ],
    ids=["succeeded-with-its-output", "failed-with-its-error"],
)
def test_a_parent_never_reads_a_childs_end_without_its_output_or_error(
    monkeypatch, child_states, parent_output
):
    ReadBeforeWritten.install(monkeypatch)
    with emulating(VirtualClock()):
        parent = ended(start(parent_of(machine(child_states)), "parent"))
    assert ReadBeforeWritten.torn == []
    assert (parent["status"], json.loads(parent["output"])) == ("SUCCEEDED", parent_output)


def test_a_stopped_parent_stops_the_child_it_waits_for():
    client = boto3.client("stepfunctions", region_name=REGION)
    # A SteppedClock never moved: the child's Wait never ends.
    with emulating(SteppedClock()):
        child = machine({"Forever": {"Type": "Wait", "Seconds": 10**7, "End": True}})
        parent = start(parent_of(child), "parent")
        child_execution = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{child.rsplit(':', 1)[1]}:child-1"
        deadline = time.monotonic() + 30
        while not client.list_executions(stateMachineArn=child)["executions"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        client.stop_execution(executionArn=parent)
        assert ended(parent)["status"] == "ABORTED"
        assert ended(child_execution)["status"] == "ABORTED"


def counted_describes(monkeypatch) -> list[str]:
    """The execution ARN of every DescribeExecution moto answers from now on, in order."""
    describes: list[str] = []
    describe = StepFunctionResponse.describe_execution

    def counted(response):
        describes.append(response._get_param("executionArn"))
        return describe(response)

    monkeypatch.setattr(StepFunctionResponse, "describe_execution", counted)
    return describes


def test_the_stepped_clock_moves_while_many_parents_wait_on_children(monkeypatch):
    """Twenty parents, each waiting on a child that waits an hour: once settled, no parent polls (each
    sleeps until an execution ends), so all are blocked and the clock moves to the children's end, and
    every parent ends."""
    describes = counted_describes(monkeypatch)
    clock = SteppedClock()
    with emulating(clock):
        child = machine(
            {"Hour": {"Type": "Wait", "Seconds": 3600, "Next": "Done"}, "Done": {"Type": "Pass", "End": True}}
        )
        client = boto3.client("stepfunctions")
        parents = [
            client.create_state_machine(
                name=f"parent-{index}",
                roleArn=ROLE_ARN,
                definition=parent_of_child(child, f"child-of-{index}"),
            )["stateMachineArn"]
            for index in range(20)
        ]
        runs = [start(parent, "run") for parent in parents]
        started = clock.time()
        clock.settle()
        polled = len(describes)
        time.sleep(0.2)  # real time: a parent polling every 5 ms would look ~40 times meanwhile
        assert len(describes) == polled

        def all_ended() -> bool:
            return all(client.describe_execution(executionArn=run)["status"] != "RUNNING" for run in runs)

        clock.run_until(all_ended, limit_seconds=2 * 3600)
        assert {client.describe_execution(executionArn=run)["status"] for run in runs} == {"SUCCEEDED"}
        assert clock.time() - started == pytest.approx(3600)


def test_a_parent_on_a_running_clock_looks_at_its_child_when_an_execution_ends_not_every_few_ms(
    monkeypatch,
):
    """A child that waits 1.5 real seconds (a minute on a ScaledClock 40 times faster), as a demo's attempt
    runs for minutes: its parent reads it when an execution ends and every half second besides, not every
    5 ms (each look costs milliseconds of CPU: a demo's waiting parents kept a core a third busy)."""
    describes = counted_describes(monkeypatch)
    with emulating(ScaledClock(40)):
        child = machine(
            {"Minute": {"Type": "Wait", "Seconds": 60, "Next": "Done"}, "Done": {"Type": "Pass", "End": True}}
        )
        begun = time.monotonic()
        parent = ended(start(parent_of(child), "parent"))
        took = time.monotonic() - begun
    assert parent["status"] == "SUCCEEDED"
    child_looks = [arn for arn in describes if arn.endswith(":child-1")]
    # One look at the start, one each half second, one at the child's end; polling every 5 ms made ~300.
    assert 2 <= len(child_looks) <= 3 + took / 0.5, (len(child_looks), took)


def test_settle_gives_up_only_after_its_timeout_without_any_change(monkeypatch):
    """Work that keeps changing for longer than STUCK_AFTER settles; nothing changing for it gives up."""
    clock = SteppedClock()
    monkeypatch.setattr(SteppedClock, "STUCK_AFTER", 0.5)
    clock.execution_started()  # one execution, working (never blocked on the clock)

    def busy_then_blocked() -> None:
        for _ in range(15):  # 1.5 real s of changes: three times STUCK_AFTER
            clock.execution_started()
            clock.execution_ended()
            time.sleep(0.1)
        clock.wait_state(60, threading.Event(), lambda: True)

    worker = threading.Thread(target=busy_then_blocked, daemon=True)
    worker.start()
    clock.settle()  # returns once the worker is blocked on its Wait
    clock.advance(60)
    worker.join(5)
    assert not worker.is_alive()
    with pytest.raises(TimeoutError, match="nothing changed for 0.5 real seconds"):
        clock.settle()  # the one execution works and nothing changes


class EndedWhileAnswering(LocalRun):
    """A local job whose supervisor records the end between two reads of it by DescribeTrainingJob."""

    _reads = 0

    @property
    def ended(self):
        self._reads += 1
        return None if self._reads == 1 else datetime(2026, 12, 5, tzinfo=UTC)

    @ended.setter
    def ended(self, value) -> None:
        """Set by the dataclass' __init__ only."""


def test_a_local_job_is_never_described_completed_without_its_end_time(tmp_path):
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "success").touch()
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    run = EndedWhileAnswering(tmp_path, tmp_path / "checkpoints", process, tmp_path / "log", False)
    job = TrainingJob({"TrainingJobName": "local-1"}, created=0.0)
    phase = run.phase(job)
    assert phase.status != "Completed" or "TrainingEndTime" in phase.fields, phase


def _count_at_once(clients: int) -> float:
    """`clients` threads each add 1 to one absent item's counter, every one of them held for 0.2 real seconds
    after finding the item absent (moto then creates it and adds): the count they leave."""
    from moto.dynamodb.models.table import Table

    get_item = Table.get_item

    def slow_get_item(self, *arguments, **named):
        item = get_item(self, *arguments, **named)
        if item is None:
            time.sleep(0.2)  # every other thread finds it absent too, unless writes are one at a time
        return item

    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(
        TableName="budget",
        KeySchema=[{"AttributeName": "team", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "team", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    def reserve() -> None:
        dynamodb.update_item(
            TableName="budget",
            Key={"team": {"S": "research"}},
            UpdateExpression="ADD runs :one",
            ConditionExpression="attribute_not_exists(runs) OR runs < :most",
            ExpressionAttributeValues={":one": {"N": "1"}, ":most": {"N": "10"}},
        )

    with mock.patch.object(Table, "get_item", slow_get_item):
        threads = [threading.Thread(target=reserve) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    item = dynamodb.get_item(TableName="budget", Key={"team": {"S": "research"}})["Item"]
    return float(item["runs"]["N"])


def test_concurrent_conditional_updates_of_one_item_each_count():
    """DynamoDB applies each write to an item whole (localaws/emulator/dynamodb_items.py); moto alone loses
    reservations made at once (a loaded run's budget never counted its fourth run)."""
    with mock_aws(), local_stepfunctions(VirtualClock()):
        assert _count_at_once(4) == 4
    with mock_aws():  # the interleaving is real: moto without the emulator's lock loses writes
        assert _count_at_once(4) < 4
