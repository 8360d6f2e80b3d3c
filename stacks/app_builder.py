"""Wires the stacks together from validated Settings; app.py and the tests both call build_app."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.checkov_skips import skip_project_wide_checks
from stacks.governed_account import apply_governance, governed, synthesizer
from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
from stacks.pipeline.pipeline_runs import PipelineRuns
from stacks.pipeline.pipeline_stack import PipelineStack
from stacks.storage.storage_stack import StorageStack
from trainstack.config import Settings


@dataclass(frozen=True)
class TrainstackStacks:
    network: NetworkStack
    storage: StorageStack
    image: ImageStack
    pipeline: PipelineStack

    @property
    def all(self) -> list[cdk.Stack]:
        return [self.network, self.storage, self.image, self.pipeline]


def build_app(app: cdk.App, settings: Settings, *, nag: bool = True) -> TrainstackStacks:
    common = {
        "env": cdk.Environment(account=settings.account, region=settings.region),
        "synthesizer": synthesizer(settings.bootstrap_qualifier),
    }
    network = network_stack(app, settings, **common)
    storage = storage_stack(app, settings, network, **common)
    image = image_stack(app, settings, network, **common)
    pipeline = pipeline_stack(app, settings, network, storage, image, **common)
    stacks = TrainstackStacks(network=network, storage=storage, image=image, pipeline=pipeline)
    for stack in stacks.all:
        for key, value in settings.tags.items():
            cdk.Tags.of(stack).add(key, value)
    apply_governance(stacks.all, settings.iam, governed=governed(settings))
    skip_project_wide_checks(app, governed=governed(settings))
    if nag:
        # cdk-nag 3.x runs as a validation plugin: an unacknowledged AwsSolutions finding fails synth.
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    if governed(settings):
        # AWS Control Tower's proactive controls, as cfn-guard rules (cdklabs' package, with the cfn-guard
        # binary): a template that Control Tower's hooks would block fails synth, naming the rule.
        from cdklabs.cdk_validator_cfnguard import CfnGuardValidator

        cdk.Validations.of(app).add_plugins(CfnGuardValidator())
    return stacks


# Each stack gets the slices of the config it reads; this module is the one place that cuts them.
def network_stack(app: cdk.App, settings: Settings, **kwargs) -> NetworkStack:
    return NetworkStack(
        app,
        f"{settings.project}-network",
        project=settings.project,
        zone=settings.training_zone,
        network=settings.network,
        governed=governed(settings),
        mlflow=any(profile.mlflow_tracking_server_arn for profile in settings.profiles),
        **kwargs,
    )


def storage_stack(app: cdk.App, settings: Settings, network: NetworkStack, **kwargs) -> StorageStack:
    return StorageStack(
        app,
        f"{settings.project}-storage",
        project=settings.project,
        governed=governed(settings),
        dataset=settings.dataset,
        checkpoints=settings.checkpoints,
        fsx_plan=settings.fsx_plan,
        access_logs_bucket=settings.access_logs_bucket,
        dataset_events=settings.retrain_on_new_data is not None,
        encryption=settings.encryption,
        network=network,
        **kwargs,
    )


def image_stack(app: cdk.App, settings: Settings, network: NetworkStack | None, **kwargs) -> ImageStack:
    """`network` hosts the image copy only with compliance: control-tower (CT.LAMBDA.PR.3)."""
    return ImageStack(
        app,
        f"{settings.project}-image",
        project=settings.project,
        image=settings.image,
        handlers_network=network if governed(settings) else None,
        **kwargs,
    )


def pipeline_stack(
    app: cdk.App,
    settings: Settings,
    network: NetworkStack,
    storage: StorageStack,
    image: ImageStack,
    **kwargs,
) -> PipelineStack:
    return PipelineStack(
        app,
        f"{settings.project}-pipeline",
        runs=PipelineRuns(project=settings.project, profiles=tuple(settings.profiles), queue=settings.queue),
        notification_emails=settings.notification_emails,
        trigger=settings.retrain_on_new_data,
        network=network,
        storage=storage,
        image=image,
        **kwargs,
    )
