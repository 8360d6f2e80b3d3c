"""Wires the stacks together from validated Settings; app.py and the tests both call build_app."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.checkov_skips import skip_project_wide_checks
from stacks.governed_account import apply_governance, governed, synthesizer
from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
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
        "synthesizer": synthesizer(settings),
    }
    prefix = settings.project
    network = NetworkStack(app, f"{prefix}-network", settings=settings, **common)
    storage = StorageStack(app, f"{prefix}-storage", settings=settings, network=network, **common)
    image = ImageStack(app, f"{prefix}-image", settings=settings, network=network, **common)
    pipeline = PipelineStack(
        app, f"{prefix}-pipeline", settings=settings, network=network, storage=storage, image=image, **common
    )
    stacks = TrainstackStacks(network=network, storage=storage, image=image, pipeline=pipeline)
    for stack in stacks.all:
        for key, value in settings.tags.items():
            cdk.Tags.of(stack).add(key, value)
    apply_governance(stacks.all, settings)
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
