"""stacks/image/image_stack.py synthesized alone (cdk.json's flags, AwsSolutions checks as in build_app)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    CDK_CONTEXT,
    CDK_JSON_CONTEXT,
    DEFAULT_CONFIG,
    NO_ENV,
    deep_merge,
    default_config_data,
)
from tests.infra.templates import mask_asset_hashes, only, resources
from trainstack.registry import code_version

BASE_DIGEST = "sha256:" + "ab12" * 16
EXISTING_URI = "222222222222.dkr.ecr.eu-west-1.amazonaws.com/team/trainer:2026-11-01"


@dataclass
class Synthesized:
    stack: Any
    template: dict[str, Any]
    assets: dict[str, Any]
    messages: list[Any]
    outdir: Path


def synthesize_image(
    overrides: dict[str, Any], outdir: Path, context: dict[str, Any] = CDK_JSON_CONTEXT
) -> Synthesized:
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from stacks.app_builder import image_stack
    from trainstack.config_loading import parse_settings

    data = deep_merge(default_config_data(), overrides)
    settings = parse_settings(data, NO_ENV, source=str(DEFAULT_CONFIG))
    # Staged as `make synth` stages by default: the tests read the image's staged build context.
    app = cdk.App(outdir=str(outdir), context=context)
    env = cdk.Environment(account=settings.account, region=settings.region)
    stack = image_stack(app, settings, None, env=env)
    # An unacknowledged AwsSolutions finding makes synth raise, so every test here also checks cdk-nag.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    artifact = app.synth().get_stack_by_name(stack.stack_name)
    assets = json.loads((outdir / f"{stack.stack_name}.assets.json").read_text())
    return Synthesized(stack, artifact.template, assets, list(artifact.messages), outdir)


def built_overrides() -> dict[str, Any]:
    # trainstack/prices.py has no eu-west-1 prices, so the default config's cost cap goes (a cap needs them).
    profiles = [
        {k: v for k, v in p.items() if k != "max_cost_usd"} for p in default_config_data()["profiles"]
    ]
    return {
        "image": {"keep_images": 7, "base_digest": BASE_DIGEST},
        "region": "eu-west-1",
        "availability_zone": "eu-west-1b",
        "profiles": profiles,
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Synthesized:
    return synthesize_image(built_overrides(), tmp_path_factory.mktemp("image-build"))


@pytest.fixture(scope="module")
def existing(tmp_path_factory) -> Synthesized:
    return synthesize_image({"image": {"uri": EXISTING_URI}}, tmp_path_factory.mktemp("image-existing"))


def docker_image_asset(synthesized: Synthesized) -> tuple[str, dict[str, Any]]:
    ((asset_hash, asset),) = synthesized.assets["dockerImages"].items()
    return asset_hash, asset


def test_repository_scans_on_push_keeps_tags_immutable_and_the_last_n_images(built):
    repository = only(built.template, "AWS::ECR::Repository")
    properties = repository["Properties"]
    assert properties["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert properties["ImageTagMutability"] == "IMMUTABLE"
    assert properties["RepositoryName"] == "trainstack-training"
    rules = json.loads(properties["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert [rule["selection"] for rule in rules] == [
        {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 7}
    ]
    assert repository["DeletionPolicy"] == "Retain"


def test_image_is_built_for_linux_amd64_from_the_container_dockerfile_with_region_and_digest(built):
    _, asset = docker_image_asset(built)
    source = asset["source"]
    assert source["platform"] == "linux/amd64"
    assert source["dockerFile"] == "container/Dockerfile"
    assert source["dockerBuildArgs"] == {
        "SMP_REGION": "eu-west-1",
        "SMP_IMAGE_DIGEST": BASE_DIGEST,
        "TRAINSTACK_CODE_VERSION": code_version(),  # the git revision, baked into the image
    }


def test_the_other_tests_unstaged_synthesis_writes_the_same_template_and_no_asset_copies(built, tmp_path):
    """The other tests synthesize with assets left where they are (tests/conftest.py's CDK_CONTEXT, as
    `cdk synth --no-staging`): this stack holds both kinds of asset, a file and a Docker build context."""
    unstaged = synthesize_image(built_overrides(), tmp_path, CDK_CONTEXT)
    assert unstaged.template == built.template
    assert unstaged.assets["files"].keys() == built.assets["files"].keys()
    assert unstaged.assets["dockerImages"].keys() == built.assets["dockerImages"].keys()
    assert list(built.outdir.glob("asset.*")) and not list(tmp_path.glob("asset.*"))


def test_build_context_is_only_what_the_image_needs(built):
    _, asset = docker_image_asset(built)
    staged = built.outdir / asset["source"]["directory"]
    top_level = sorted(path.name for path in staged.iterdir())
    assert top_level == [".dockerignore", "container", "training_scripts"]
    assert sorted(path.name for path in (staged / "container").iterdir()) == [
        "Dockerfile",
        "base-image-versions.txt",
        "preflight.py",
        "requirements.txt",
        "train",
        "versions_manifest.py",
    ]


def test_image_uri_is_the_repository_tagged_with_the_asset_hash_after_the_copy(built):
    asset_hash, _ = docker_image_asset(built)
    copy = only(built.template, "Custom::CDKECRDeployment")["Properties"]
    assert asset_hash in json.dumps(copy["SrcImage"]) and "container-assets" in json.dumps(copy["SrcImage"])
    destination = copy["DestImage"]["Fn::Join"][1]
    repository_uri = {"Fn::GetAtt": ["Repository22E53BBD", "RepositoryUri"]}
    assert destination == ["docker://", repository_uri, f":{asset_hash}"]
    output = built.template["Outputs"]["ImageUri"]["Value"]["Fn::Join"][1]
    assert output == [repository_uri, f":{asset_hash}"]
    assert built.stack.repository.node.path.endswith("/Repository")


def test_copy_function_may_pull_from_the_assets_repository_and_push_only_to_ours(built):
    (policy,) = resources(built.template, "AWS::IAM::Policy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    by_resource = {json.dumps(statement["Resource"]): statement["Action"] for statement in statements}
    assert by_resource['"*"'] == "ecr:GetAuthorizationToken"
    pushes = [resource for resource, actions in by_resource.items() if "ecr:PutImage" in actions]
    assert pushes == [json.dumps({"Fn::GetAtt": ["Repository22E53BBD", "Arn"]})]
    assert not any("s3:" in json.dumps(actions) for actions in by_resource.values())
    function = only(built.template, "AWS::Lambda::Function")["Properties"]
    assert function["Role"] == {"Fn::GetAtt": ["CopyImageRoleC76DF554", "Arn"]}


def test_missing_base_digest_warns_at_synth_naming_the_field(tmp_path):
    synthesized = synthesize_image({}, tmp_path)
    warnings = [
        str(message.entry.data) for message in synthesized.messages if message.level.name == "WARNING"
    ]
    assert any("image.base_digest is not set" in warning for warning in warnings), warnings
    _, asset = docker_image_asset(synthesized)
    assert "SMP_IMAGE_DIGEST" not in asset["source"]["dockerBuildArgs"]


def test_no_warning_when_the_digest_is_set(built):
    assert not [message for message in built.messages if message.level.name == "WARNING"]


def test_existing_uri_builds_nothing_and_passes_the_uri_through(existing):
    assert existing.stack.image_uri == EXISTING_URI
    assert existing.template["Outputs"]["ImageUri"]["Value"] == EXISTING_URI
    assert not existing.assets.get("dockerImages")
    types = {body["Type"] for body in existing.template["Resources"].values()}
    assert types <= {"AWS::SSM::Parameter", "AWS::CDK::Metadata"}, types
    parameter = only(existing.template, "AWS::SSM::Parameter")["Properties"]
    assert (parameter["Name"], parameter["Value"]) == ("/trainstack/training-image-uri", EXISTING_URI)


def test_existing_uri_still_names_its_repository_so_pull_can_be_granted(existing):
    import aws_cdk as cdk

    repository = existing.stack.repository
    assert cdk.Stack.of(repository).resolve(repository.repository_arn) == (
        "arn:aws:ecr:eu-west-1:222222222222:repository/team/trainer"
    )
    assert repository.repository_name == "team/trainer"


def test_template_snapshot(built, snapshot):
    assert mask_asset_hashes(built.template) == snapshot


def test_a_malformed_base_digest_is_a_config_error_naming_the_field():
    from trainstack.config_loading import ConfigError, parse_settings

    data = deep_merge(default_config_data(), {"image": {"base_digest": "2.5.1-gpu-py311-cu124"}})
    with pytest.raises(
        ConfigError,
        match=r"image\.base_digest: '2\.5\.1-gpu-py311-cu124' is not an image digest: sha256: and 64 hex",
    ):
        parse_settings(data, NO_ENV, source="test config")
