"""Wires the stacks together from validated Settings; app.py and the tests both call build_app."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.checkov_skips import skip_project_wide_checks
from stacks.governed_account import apply_governance, governed, governed_rules_waived, synthesizer
from stacks.image.image_stack import ImageStack
from stacks.network.network_stack import NetworkStack
from stacks.pipeline.client_settings import ClientSettings
from stacks.pipeline.pipeline_stack import PipelineStack
from stacks.pipeline.queue.queue_stack import QueueStack
from stacks.storage.storage_stack import StorageStack
from trainstack.client_settings import client_document
from trainstack.config import Settings
from trainstack.express_buckets import express_buckets
from trainstack.pipeline_runs import all_pipeline_runs, existing_run_names, queue_namespace, shared_queue
from trainstack.team_tracking import shared_server_warning, uses_mlflow
from trainstack.teams import authorizing_tag_keys
from trainstack.trigger_settings import trigger_of, triggers_on


@dataclass(frozen=True)
class TrainstackStacks:
    network: NetworkStack
    storage: StorageStack
    image: ImageStack
    pipelines: tuple[PipelineStack, ...]  # one, or with teams one per team
    queue: QueueStack | None = None  # with teams in queue mode: the queue they share

    @property
    def pipeline(self) -> PipelineStack:
        """The first (without teams, the only) pipeline."""
        return self.pipelines[0]

    @property
    def all(self) -> list[cdk.Stack]:
        return [
            self.network,
            self.storage,
            self.image,
            *([self.queue] if self.queue else []),
            *self.pipelines,
        ]


def build_app(app: cdk.App, settings: Settings, *, nag: bool = True) -> TrainstackStacks:
    common = {
        "env": cdk.Environment(account=settings.account, region=settings.region),
        "synthesizer": synthesizer(settings.bootstrap_qualifier),
    }
    network = network_stack(app, settings, **common)
    storage = storage_stack(app, settings, network, **common)
    image = image_stack(app, settings, network, **common)
    queue = queue_stack(app, settings, **common)
    pipelines = pipeline_stacks(app, settings, network, storage, image, queue, **common)
    stacks = TrainstackStacks(network=network, storage=storage, image=image, pipelines=pipelines, queue=queue)
    if warning := shared_server_warning(settings):
        cdk.Annotations.of(pipelines[0]).add_warning_v2("trainstack:shared-tracking-server", warning)
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
        from stacks.control_tower_rules import ControlTowerRules

        cdk.Validations.of(app).add_plugins(ControlTowerRules(governed_rules_waived(settings)))
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
        mlflow=uses_mlflow(settings),
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
        dataset_events=triggers_on(settings),
        fsx_checkpoints=any(profile.checkpoint_store == "fsx" for profile in settings.profiles),
        encryption=settings.encryption,
        express=express_buckets(settings),
        object_lock_in_place=settings.migrations.object_lock_in_place,
        keep_split_fsx_links=settings.migrations.keep_split_fsx_links,
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
        keep_repository=settings.migrations.keep_image_repository,
        **kwargs,
    )


def queue_stack(app: cdk.App, settings: Settings, **kwargs) -> QueueStack | None:
    """With teams in queue mode, the one queue they share; without teams the pipeline stack holds it."""
    # With queue mode off, it stays for a kept run-names table of its own (migrations.keep_run_names_table).
    kept_table = settings.migrations.keep_run_names_table and existing_run_names(settings) is None
    if not (settings.teams and (settings.queue.enabled or kept_table)):
        return None
    return QueueStack(
        app,
        f"{settings.project}-queue",
        project=queue_namespace(settings),
        queue=shared_queue(settings),
        keep_run_names_table=settings.migrations.keep_run_names_table,
        existing_run_names=existing_run_names(settings),
        **kwargs,
    )


def pipeline_stacks(
    app: cdk.App,
    settings: Settings,
    network: NetworkStack,
    storage: StorageStack,
    image: ImageStack,
    queue: QueueStack | None,
    **kwargs,
) -> tuple[PipelineStack, ...]:
    """`<project>-pipeline`, or with teams `<project>-<team>-pipeline` for each team, each publishing the
    config for the CLI's --deployment (stacks/pipeline/client_settings.py)."""
    teams = {team.name: team for team in settings.teams}
    stacks = tuple(
        PipelineStack(
            app,
            f"{runs.project}-pipeline",
            runs=runs,
            notification_emails=settings.notification_emails,
            trigger=trigger_of(settings, runs.team),  # with teams, the team's own (docs/trigger.md)
            network=network,
            storage=storage,
            image=image,
            team=teams.get(runs.team) if runs.team else None,
            queue=queue.queue if queue else None,
            guarded_tag_keys=authorizing_tag_keys(settings.teams),
            **kwargs,
        )
        for runs in all_pipeline_runs(settings)
    )
    for stack, runs in zip(stacks, all_pipeline_runs(settings), strict=True):
        ClientSettings(
            stack, "ClientSettings", project=runs.project, document=client_document(settings, runs.team)
        )
    return stacks
