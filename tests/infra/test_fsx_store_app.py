"""config/examples/fsx-checkpoints.yaml, a profile on the fsx checkpoint store, synthesized as the whole app:
its request mounts the pipeline's checkpoint directory read-write, the attempt machine's guard allows that
directory, CreateTrainingJob is granted on it, and the same config under compliance: control-tower passes
synth's Control Tower rules and cdk-nag (synth fails on any open finding: tests/infra/test_governed.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import NO_ENV, REPO_ROOT, deep_merge
from tests.infra.templates import load_templates, resources
from tests.infra.test_app_quality import run_cfn_lint
from tests.infra.test_governed import GOVERNED

EXAMPLE = REPO_ROOT / "config/examples/fsx-checkpoints.yaml"


def example_settings(overrides: dict | None = None):
    import yaml

    from trainstack.config_loading import parse_settings

    data = deep_merge(yaml.safe_load(EXAMPLE.read_text()), overrides or {})
    return parse_settings(data, NO_ENV, source=str(EXAMPLE))


@pytest.fixture(scope="module", params=["none", "control-tower"])
def fsx_store_app(request, synthesized_directory):
    settings = example_settings(GOVERNED if request.param == "control-tower" else None)
    return settings, synthesized_directory(settings)


def pipeline_machine(templates, name: str) -> dict:
    (machine,) = [
        body["Properties"]
        for body in resources(templates["trainstack-pipeline"], "AWS::StepFunctions::StateMachine").values()
        if body["Properties"]["StateMachineName"] == name
    ]
    return machine


def test_the_fsx_profile_mounts_the_checkpoint_directory_the_guard_and_iam_allow(fsx_store_app):
    _, outdir = fsx_store_app
    templates = load_templates(outdir)
    definition = json.dumps(pipeline_machine(templates, "trainstack-pipeline")["DefinitionString"])
    assert "${CheckpointDirectoryPath}" in definition and '\\\\\\"FileSystemAccessMode\\\\\\":\\\\\\"rw' in (
        definition
    )
    attempt = json.dumps(pipeline_machine(templates, "trainstack-pipeline-attempt")["DefinitionString"])
    assert '[\\\\\\"${FileSystemDirectoryPath}\\\\\\",\\\\\\"${CheckpointDirectoryPath}\\\\\\"]' in attempt
    policies = json.dumps(resources(templates["trainstack-pipeline"], "AWS::IAM::Policy"))
    assert '"/checkpoints/all/*"' in policies, "CreateTrainingJob's FileSystemDirectoryPath condition"


def test_the_fsx_store_app_passes_cfn_lint(fsx_store_app):
    _, outdir = fsx_store_app
    result = run_cfn_lint(sorted(outdir.glob("*.template.json")))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
