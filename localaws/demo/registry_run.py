"""The demo's model registry part (docs/registry.md): the dataset and the evaluation set where the pipeline
lists and reads them, the profile's model package group as the stack creates it, a second, deliberately
worse run after the first, and what the gate decided for each."""

from __future__ import annotations

import json
import shutil

from localaws import clients
from localaws.demo.target import DemoTarget
from localaws.s3_endpoint import create_bucket
from localaws.sagemaker.local_processes import LocalTraining
from trainstack.pipeline_runs import all_pipeline_runs
from trainstack.registry import LEASE_KEY, group_name, lease_table_name

# A stand-in image manifest for (moto's) ECR: it needs a media type to store the image.
MANIFEST = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    "layers": [],
}
# Steps of the deliberately worse run: far from what the first run reached, so its evaluation loss is higher.
WORSE_STEPS = 3


def stage(
    target: DemoTarget, substitutions: dict[str, str], training: LocalTraining, held_out: str = "val"
) -> None:
    """The dataset's files in (moto's) S3 under the pipeline's dataset prefix, where the training-set
    manifest lists them; the held-out evaluation set (the dataset's `held_out` folder: the Llama shards' val)
    under the profile's evaluation_prefix, in moto's S3 (the manifest) and in local S3 (the evaluation job's
    channel), where the
    profile has a registry: block; the jobs' image in (moto's) ECR; the profile's group."""
    dataset_bucket, image_uri = substitutions["DatasetBucket"], substitutions["TrainingImageUri"]
    s3 = clients.client("s3")
    create_bucket(s3, dataset_bucket, target.settings.region)
    registry = target.profile.registry
    evaluation_prefix = registry.evaluation_prefix if registry else None
    if evaluation_prefix:
        local_evaluation = training.local_path(f"s3://{dataset_bucket}/{evaluation_prefix}")
        local_evaluation.mkdir(parents=True, exist_ok=True)
    for shard in sorted(path for path in training.dataset_dir.rglob("*") if path.is_file()):
        key = f"{target.dataset_prefix}{shard.parent.name}/{shard.name}"
        s3.put_object(Bucket=dataset_bucket, Key=key, Body=shard.read_bytes())
        if evaluation_prefix and shard.parent.name == held_out:
            shutil.copy(shard, local_evaluation / shard.name)
            s3.put_object(
                Bucket=dataset_bucket, Key=f"{evaluation_prefix}{shard.name}", Body=shard.read_bytes()
            )
    register_image(image_uri)
    if registry:
        clients.client("sagemaker").create_model_package_group(
            ModelPackageGroupName=group_name(target.runs.project, target.profile.name)
        )
        create_lease_table(target.runs.project)


def create_lease_table(project: str) -> None:
    """The registrations' lease table, as the stack declares it (stacks/pipeline/registry/group_lease.py),
    unless a deployment of the template's tables made it already (demo.synthesized.create_tables)."""
    dynamodb = clients.client("dynamodb")
    if lease_table_name(project) in dynamodb.list_tables()["TableNames"]:
        return
    dynamodb.create_table(
        TableName=lease_table_name(project),
        KeySchema=[{"AttributeName": LEASE_KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": LEASE_KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def register_image(image_uri: str) -> None:
    """The image the jobs name (`<registry>/<repository>:<tag>`) in (moto's) ECR, so that a version records
    its digest."""
    repository, _, tag = image_uri.partition("/")[2].partition(":")
    ecr = clients.client("ecr")
    ecr.create_repository(repositoryName=repository)
    ecr.put_image(repositoryName=repository, imageManifest=json.dumps(MANIFEST), imageTag=tag)


def deploy_registry_resources(settings, dataset_bucket: str, image_uri: str) -> None:
    """What the deployed stacks hold that the registration machine reads, for scripted jobs (nothing reads
    the shards): the jobs' image in ECR, a one-shard evaluation set under each registered profile's
    evaluation_prefix in the (existing) dataset bucket, each registered profile's model package group, the
    lease table of each team's registrations."""
    register_image(image_uri)
    s3, sagemaker = clients.client("s3"), clients.client("sagemaker")
    for runs in all_pipeline_runs(settings):  # with teams, each team's groups
        if any(profile.registry is not None for profile in runs.profiles):
            create_lease_table(runs.project)
        for profile in runs.profiles:
            if profile.registry is not None:
                key = f"{profile.registry.evaluation_prefix}eval-000.bin"
                s3.put_object(Bucket=dataset_bucket, Key=key, Body=key.encode())
                sagemaker.create_model_package_group(
                    ModelPackageGroupName=group_name(runs.project, profile.name)
                )


def decision_line(output: dict) -> str:
    """What the gate decided for a run, with its figures."""
    package = output.get("modelPackage")
    if not package:
        return "not registered (the profile has no registry: block)"
    evaluation = package["evaluation"]
    # A team's own evaluation reports its metric only (trainstack.model_versions.run_facts).
    figure = f"loss {evaluation['loss']:.4f}" if "loss" in evaluation else f"metric {evaluation['metric']:g}"
    decided = f"version {package['version']} {package['decision']}"
    return f"{decided} (evaluation {figure}): {package['reason']}"


def worse_hyperparameters() -> dict[str, str]:
    """The second run's changes: the same profile trained WORSE_STEPS steps only."""
    steps = str(WORSE_STEPS)
    return {"max_steps": steps, "checkpoint_interval": steps, "val_interval": steps, "warmup_steps": "1"}


def execution_output(state_machine_arn: str, run_name: str) -> dict | None:
    client = clients.client("stepfunctions")
    for item in client.list_executions(stateMachineArn=state_machine_arn)["executions"]:
        if item["name"] == run_name:
            described = client.describe_execution(executionArn=item["executionArn"])
            return json.loads(described["output"]) if described.get("output") else None
    return None
