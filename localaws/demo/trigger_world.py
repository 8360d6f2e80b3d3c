"""The retrain trigger's world on this machine, for `make demo-trigger` and the trigger's tests: moto's S3
(dataset bucket with EventBridge notifications on), EventBridge (the trigger's rule, starting the trigger
machine: localaws.emulator.event_targets), DynamoDB (the trigger table), Step Functions running the
trigger machine and the synthesized pipeline's machines (attempt, registration) on a SteppedClock, what
the registration machine reads (registry_run.deploy_registry_resources: ECR image, evaluation set, model
package groups), a SageMaker fake and, with FSx, the FSx data repository task fake
(localaws.emulator.fake_fsx). Time moves only when `run_until` jumps to the next
Wait's end or a caller advances it, so uploads land exactly when the scenario says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from moto import mock_aws

from localaws import clients
from localaws.demo.registry_run import deploy_registry_resources
from localaws.emulator import SteppedClock, local_stepfunctions
from localaws.emulator.event_targets import install_state_machine_targets
from localaws.emulator.fake_fsx import FakeFsx, install_fake_fsx
from localaws.sagemaker import ACCOUNT, FakeSageMaker, install_fake_sagemaker

REGION = "us-east-1"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/trainstack-local"
ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class TriggerRoute:
    """One retrain trigger: its rule, its machine, its state table and the pipeline it starts."""

    trigger: str  # the trigger machine's name
    pipeline: str
    rule_pattern: dict[str, Any]  # the trigger rule's EventPattern, naming the local bucket
    table: str


@dataclass(frozen=True)
class TriggerMachines:
    """State machine name -> definition (placeholders filled), created in this order (children first)."""

    definitions: dict[str, str]
    routes: tuple[TriggerRoute, ...]  # one, or with teams one per team with a trigger
    bucket: str
    settings: Any  # the config the app was synthesized with: its registered profiles
    image_uri: str  # the training image the pipeline's requests name

    @property
    def trigger(self) -> str:
        """The first (without teams, the only) trigger machine; likewise `pipeline` and `table`."""
        return self.routes[0].trigger

    @property
    def pipeline(self) -> str:
        return self.routes[0].pipeline

    @property
    def table(self) -> str:
        return self.routes[0].table


@dataclass
class TriggerWorld:
    machines: TriggerMachines
    clock: SteppedClock
    sagemaker: FakeSageMaker
    fsx: FakeFsx | None
    arns: dict[str, str]

    def upload(self, key: str, body: bytes = b"\x01\x00\x02\x00") -> None:
        """Put an object and let the trigger execution it starts record it."""
        clients.client("s3", REGION).put_object(Bucket=self.machines.bucket, Key=key, Body=body)
        self.clock.settle()

    def executions(self, name: str) -> list[dict[str, Any]]:
        """The executions of a machine, oldest first, described (status, input, output, error, cause)."""
        client = clients.client("stepfunctions", REGION)
        listed = client.list_executions(stateMachineArn=self.arns[name])["executions"]
        return [
            client.describe_execution(executionArn=item["executionArn"])
            for item in sorted(listed, key=lambda item: item["startDate"])
        ]

    def runs(self, route: TriggerRoute | None = None) -> list[dict[str, Any]]:
        """The executions of the route's pipeline (default: the first route's)."""
        return self.executions((route or self.machines.routes[0]).pipeline)

    def triggers(self, route: TriggerRoute | None = None) -> list[dict[str, Any]]:
        return self.executions((route or self.machines.routes[0]).trigger)

    def item(self, route: TriggerRoute | None = None) -> dict[str, Any]:
        """The trigger table's items (DynamoDB JSON), by profile."""
        table = (route or self.machines.routes[0]).table
        items = clients.client("dynamodb", REGION).scan(TableName=table)["Items"]
        return {item["profile"]["S"]: item for item in items}

    def idle(self) -> bool:
        client = clients.client("stepfunctions", REGION)
        return not any(
            client.list_executions(stateMachineArn=self.arns[name], statusFilter="RUNNING")["executions"]
            for route in self.machines.routes
            for name in (route.trigger, route.pipeline)
        )

    def run_until_idle(self, limit_seconds: float = 7 * 86_400) -> None:
        """Let clock time pass until no trigger or pipeline execution runs."""
        self.clock.run_until(self.idle, limit_seconds=limit_seconds)

    def advance(self, seconds: float) -> None:
        """`seconds` of clock time pass, stopping at each Wait that ends on the way."""
        target = self.clock.time() + seconds
        self.clock.run_until(lambda: (self.clock.next_end() or target + 1) > target, limit_seconds=seconds)
        self.clock.advance(max(0.0, target - self.clock.time()))
        self.clock.settle()


@contextmanager
def trigger_world(
    machines: TriggerMachines, sagemaker: FakeSageMaker, fsx: FakeFsx | None, monkeypatch
) -> Iterator[TriggerWorld]:
    for variable, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "MOTO_ACCOUNT_ID": ACCOUNT,
    }.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    install_fake_sagemaker(sagemaker, monkeypatch)
    install_state_machine_targets(monkeypatch)
    if fsx is not None:
        install_fake_fsx(fsx, monkeypatch)
    clock = SteppedClock()
    if fsx is not None:
        fsx.now = clock.watched_time
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), local_stepfunctions(clock):
        _create_resources(machines)
        client = clients.client("stepfunctions", REGION)
        arns = {
            # Published: the parents' definitions name version 1 of their children.
            name: client.create_state_machine(
                name=name, definition=definition, roleArn=ROLE_ARN, publish=True
            )["stateMachineArn"]
            for name, definition in machines.definitions.items()
        }
        events = clients.client("events", REGION)
        for index, route in enumerate(machines.routes):
            rule = f"new-data-{index}"
            events.put_rule(Name=rule, EventPattern=json.dumps(route.rule_pattern))
            events.put_targets(
                Rule=rule, Targets=[{"Id": "trigger", "Arn": arns[route.trigger], "RoleArn": ROLE_ARN}]
            )
        yield TriggerWorld(machines, clock, sagemaker, fsx, arns)


def _create_resources(machines: TriggerMachines) -> None:
    s3 = clients.client("s3", REGION)
    s3.create_bucket(Bucket=machines.bucket)
    # Before the notifications: the evaluation set lands where no trigger watches anyway.
    deploy_registry_resources(machines.settings, machines.bucket, machines.image_uri)
    # What the storage stack sets on the dataset bucket (NotificationConfiguration.EventBridgeConfiguration).
    s3.put_bucket_notification_configuration(
        Bucket=machines.bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    for route in machines.routes:
        clients.client("dynamodb", REGION).create_table(
            TableName=route.table,
            KeySchema=[{"AttributeName": "profile", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "profile", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
