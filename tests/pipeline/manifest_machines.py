"""The DatasetManifest fragment in a small synthesized stack: a caller machine (the fragment, then its
manifest or its caught error as output) beside the stack's child machine `<project>-dataset-manifest`, both
definitions filled as CloudFormation would deploy them, created in the emulator by `create`. Used by the
manifest tests and benchmarks/manifest_scale.py."""

from __future__ import annotations

import aws_cdk as cdk
import boto3
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn

from stacks.pipeline.dataset_manifest import DatasetManifest
from stacks.pipeline.jsonata_text import expression
from tests.pipeline import harness
from tests.pipeline.conftest import filled_definition, state_machines

PROJECT = "trainstack"
CALLER = "manifest-caller"
LISTING = f"{PROJECT}-dataset-manifest"


def manifest_definitions(bucket: str) -> dict[str, str]:
    """Machine name -> definition: the caller (input {"prefix"}; output {"manifest", "input"}, or
    {"caught": the error add_catch's handler sees}) and the child machine; the child first."""
    app = cdk.App()
    stack = cdk.Stack(app, "Manifest", env=cdk.Environment(account=harness.ACCOUNT, region=harness.REGION))
    manifest = DatasetManifest(
        stack,
        "Manifest",
        project=PROJECT,
        bucket=s3.Bucket.from_bucket_name(stack, "Datasets", bucket),
        prefix="$states.input.prefix",
        listed_prefixes=[""],  # the tests' prefixes, any (IAM is not emulated)
    )
    caught = sfn.Succeed.jsonata(stack, "Caught", outputs=expression('{"caught": $failure}'))
    manifest.add_catch(caught, assign={"failure": expression("$states.errorOutput")})
    report = sfn.Succeed.jsonata(
        stack, "Report", outputs=expression('{"manifest": $datasetManifest, "input": $states.input}')
    )
    sfn.StateMachine(
        stack,
        "Caller",
        state_machine_name=CALLER,
        query_language=sfn.QueryLanguage.JSONATA,
        definition_body=sfn.DefinitionBody.from_chainable(manifest.next(report)),
    )
    template = app.synth().get_stack_by_name(stack.stack_name).template
    machines = state_machines(template)
    return {name: filled_definition(machines[name], template) for name in (LISTING, CALLER)}


def create(definitions: dict[str, str]) -> dict[str, str]:
    """Create the machines (children first); name -> ARN."""
    return {name: harness.create_state_machine(text, name) for name, text in definitions.items()}


def listing_histories() -> list[int]:
    """The number of history events of each child execution, oldest first."""
    client = boto3.client("stepfunctions", region_name=harness.REGION)
    machines = client.list_state_machines()["stateMachines"]
    (listing,) = [machine["stateMachineArn"] for machine in machines if machine["name"] == LISTING]
    return [len(outcome.history) for outcome in harness.executions(listing)]
