"""Install a FakeSageMaker behind moto, so boto3 clients and the state machines' aws-sdk:sagemaker:*
tasks reach it: the same way as the fake Batch (localaws/emulator/batch_routes.py), by replacing
moto's SageMakerResponse handlers for the rest of a test (`monkeypatch` undoes it; a demo passes
`pytest.MonkeyPatch.context()`).

moto's own SageMaker reports every job Completed at once, lacks StopTrainingJob and validates nothing.
moto answers SageMaker's JSON protocol with an action's handler (`create_training_job` for
CreateTrainingJob); an error the fake raises (`localaws.emulator.service_error`) is serialized as
SageMaker's JSON error with its code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from moto.core.responses import ActionResult, EmptyResult
from moto.sagemaker.responses import SageMakerResponse

from localaws.sagemaker import model_registry
from localaws.sagemaker.training_jobs import FakeSageMaker


def _routes(fake: FakeSageMaker) -> dict[str, Callable[[dict[str, Any]], Any]]:
    def stop(body: dict[str, Any]) -> EmptyResult:
        fake.stop(body["TrainingJobName"])
        return EmptyResult()

    return {
        "create_training_job": lambda body: ActionResult(fake.create(body)),
        "describe_training_job": lambda body: ActionResult(fake.describe(body["TrainingJobName"])),
        "stop_training_job": stop,
        "list_training_jobs": lambda body: ActionResult(fake.list_training_jobs(body)),
        "search": lambda body: ActionResult(fake.search(body)),
        "list_tags": lambda body: ActionResult(fake.list_tags(body["ResourceArn"])),
        "add_tags": lambda body: ActionResult(fake.add_tags(body["ResourceArn"], body["Tags"])),
    }


def install_fake_sagemaker(fake: FakeSageMaker, monkeypatch) -> None:
    """Route SageMaker's training-job calls to `fake` for the rest of the test."""
    for name, route in _routes(fake).items():
        monkeypatch.setattr(SageMakerResponse, name, _handler(route), raising=False)
    model_registry.install(monkeypatch, fake.registry, fake.control)


def _handler(route: Callable[[dict[str, Any]], Any]):
    def handle(self: SageMakerResponse) -> Any:
        return route(json.loads(self.body or "{}"))

    return handle
