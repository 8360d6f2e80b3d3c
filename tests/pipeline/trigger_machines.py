"""The retrain trigger built alone (a small stack: the trigger construct, a stand-in pipeline named as the
real one), its machine definition filled like the synthesized pipeline's, ready for trigger_world."""

from __future__ import annotations

from types import SimpleNamespace

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn

from localaws.demo.trigger_world import TriggerMachines, TriggerRoute
from stacks.pipeline.trigger.retrain_trigger import RetrainTrigger
from tests.infra.templates import resources
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, SynthesizedPipeline, filled_definition, state_machines
from trainstack.trigger_settings import RetrainOnNewData, trigger_machine_name, trigger_table_name

PROJECT = "trainstack"
PROFILE = "small-torchrun"
PREFIX = "datasets/corpus/"
TRIGGER = RetrainOnNewData(
    profile=PROFILE, prefix=PREFIX, quiet_minutes=15, max_delay_hours=1, fsx_import_timeout_minutes=5
)


def trigger_templates(settings) -> dict[str, dict]:
    """Two small stacks in one synth: the trigger with FSx (`fsx`) and without (`no-fsx`)."""
    app = cdk.App()
    stacks = {}
    for variant, file_system in (("fsx", FAKE_VALUES["FileSystemId"]), ("no-fsx", None)):
        stack = cdk.Stack(
            app, f"Trigger-{variant}", env=cdk.Environment(account=harness.ACCOUNT, region=harness.REGION)
        )
        storage = SimpleNamespace(
            dataset_bucket=s3.Bucket.from_bucket_name(stack, "Datasets", FAKE_VALUES["DatasetBucket"]),
            dataset_prefix=settings.dataset.prefix,
            file_system_id=file_system,
        )
        pipeline = sfn.StateMachine(
            stack,
            "Pipeline",
            state_machine_name=f"{PROJECT}-pipeline",
            definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "StandIn")),
        )
        RetrainTrigger(
            stack,
            "RetrainTrigger",
            project=PROJECT,
            trigger=TRIGGER,
            storage=storage,
            pipeline=pipeline,
            profiles=settings.profiles,
        )
        stacks[variant] = stack
    assembly = app.synth()
    return {
        variant: assembly.get_stack_by_name(stack.stack_name).template for variant, stack in stacks.items()
    }


def trigger_machines(template: dict, pipeline: SynthesizedPipeline) -> TriggerMachines:
    """The trigger machine of `template` and its dataset manifest's child machine beside the real
    (synthesized) pipeline, attempt and registration machines (the registration's manifests use the same
    child definition)."""
    name = trigger_machine_name(PROJECT)
    listing = f"{PROJECT}-dataset-manifest"
    (rule,) = resources(template, "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    return TriggerMachines(
        definitions={
            listing: filled_definition(state_machines(template)[listing], template),
            f"{PROJECT}-pipeline-attempt": pipeline.attempt_definition,
            f"{PROJECT}-pipeline-registration": pipeline.registration_definition,
            f"{PROJECT}-pipeline": pipeline.training_definition,
            name: filled_definition(state_machines(template)[name], template),
        },
        routes=(TriggerRoute(name, f"{PROJECT}-pipeline", pattern, trigger_table_name(PROJECT)),),
        bucket=FAKE_VALUES["DatasetBucket"],
        settings=pipeline.settings,
        image_uri=FAKE_VALUES["TrainingImageUri"],
    )
