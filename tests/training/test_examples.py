"""The examples under examples/ (not the built-in Llama) run end to end in the emulator as a team's own code,
on the image's versions (torch 2.5.1, transformers 4.44.2): each directory is packed and uploaded as
`trainstack start --code DIR --entry train.py` does, and the synthesized pipeline runs it as a run of a
profile whose evaluation is the team's own (`evaluate_model.py`, accuracy, maximize). The first job loses its
capacity after its first checkpoint; the second resumes that checkpoint through the runtime library and ends
with the weights of an uninterrupted run of the same example (same data, seed and world size, run beside it
with torchrun); the evaluation job runs the example's own evaluation entry point from the run's bundle, the
gate approves on its accuracy, and the version's lineage names the bundle's digest.

The first job's rank 1 stops for good before step 8 (the library's hang drill): a tiny model would otherwise
finish its last step before the capacity loss lands, which comes after the step-5 checkpoint is complete."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch

from localaws.sagemaker.local_processes import LocalRun, LocalTraining
from localaws.sagemaker.scripted import CAPACITY_ERROR
from localaws.sagemaker.training_jobs import FakeSageMaker, TrainingJob, model_uri
from tests.conftest import synthesize
from tests.pipeline import harness
from tests.pipeline.conftest import (
    FAKE_VALUES,
    REGISTRY_GROUP,
    REGISTRY_PROFILE,
    deploy_registry_resources,
    synthesized_pipeline,
)
from tests.pipeline.test_team_code_run import EndedFirst
from tests.queue.test_queue_config import settings_with, with_profile_field
from tests.training.harness import REPO_ROOT, SCRIPTS, Background, load_weights, max_weight_difference
from tests.training.harness import torchrun_command as torchrun
from training_scripts.metrics import METRICS_KEY
from trainstack.registry import EVALUATION_FILE, LINEAGE_KEYS
from trainstack.team_code import SUBMIT_DIRECTORY_HYPERPARAMETER as SUBMIT
from trainstack.team_code import code_prefix, pack, upload

EXAMPLES = REPO_ROOT / "examples"
CHECKPOINT_INTERVAL = 5
EVALUATION_PREFIX = "evaluation/small/"
EVALUATION = {
    "metric": {"name": "accuracy", "goal": "maximize", "tolerance": 0.01},
    "entry_point": "evaluate_model.py",
}
STEPS = {"max_steps": "20", "checkpoint_interval": str(CHECKPOINT_INTERVAL)}
HANG = {"inject_hang_at_step": str(CHECKPOINT_INTERVAL + 3), "inject_hang_rank": "1"}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The default config with REGISTRY_PROFILE evaluating by the team's own entry point and metric."""
    names = [profile["name"] for profile in settings_with({}).model_dump()["profiles"]]
    profiles = with_profile_field(
        names.index(REGISTRY_PROFILE),
        registry={"evaluation_prefix": EVALUATION_PREFIX, "approval": "auto", "first_version": "Approved"},
        evaluation=EVALUATION,
    )
    settings = settings_with({"profiles": profiles})
    return synthesized_pipeline(settings, *synthesize(settings, tmp_path_factory.mktemp("cdk.out")))


@dataclass
class LocalJobs:
    """Every job, training and evaluation, run by `training`'s processes."""

    training: LocalTraining

    def start(self, job: TrainingJob) -> Any:
        run = self.training.start(job)
        return EndedFirst(run) if isinstance(run, LocalRun) else run


def generator(example: str, script: str, function: str):
    spec = importlib.util.spec_from_file_location(script, EXAMPLES / example / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)


def run_example(pipeline, monkeypatch, tmp_path: Path, example: str, data: str, make, hyperparameters):
    """The example run by the pipeline as a team's code, and the uninterrupted reference beside it:
    (outcome, the fake SageMaker, the training, the model version, the bundle's digest, the reference's model
    dir)."""
    dataset = tmp_path / "dataset"
    (dataset / "train").mkdir(parents=True)
    torch.save(make(256, 1), dataset / "train" / data)
    training = LocalTraining(
        tmp_path / "emulator", dataset, capacity_failures=1, hang_failures=1, hang_hyperparameters=HANG
    )
    evaluation_set = training.local_path(f"s3://{FAKE_VALUES['DatasetBucket']}/{EVALUATION_PREFIX}")
    evaluation_set.mkdir(parents=True)
    torch.save(make(128, 2), evaluation_set / data)
    flags = [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]
    reference = Background(
        None,
        tmp_path / "reference",
        command=torchrun(
            *flags,
            "--model-dir",
            str(tmp_path / "reference" / "model"),
            "--checkpoint-dir",
            str(tmp_path / "reference" / "checkpoints"),
            script=EXAMPLES / example / "train.py",
        ),
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1",
            "SM_CHANNEL_TRAIN": str(dataset / "train"),
        },
    )
    fake = FakeSageMaker(behaviour=LocalJobs(training))
    try:
        with harness.pipeline_environment(fake, monkeypatch):
            deploy_registry_resources(pipeline.settings)
            harness.create_state_machine(pipeline.manifest_definition, "trainstack-dataset-manifest")
            harness.create_state_machine(pipeline.attempt_definition, "trainstack-pipeline-attempt")
            harness.create_state_machine(pipeline.cleanup_definition, "trainstack-job-cleanup")
            harness.create_state_machine(pipeline.registration_definition, "trainstack-pipeline-registration")
            pipeline_arn = harness.create_state_machine(pipeline.training_definition, "trainstack-pipeline")
            sagemaker, s3 = boto3.client("sagemaker"), boto3.client("s3")
            sagemaker.create_model_package_group(ModelPackageGroupName=REGISTRY_GROUP)  # the stack's group
            s3.create_bucket(Bucket=FAKE_VALUES["ArtifactBucket"])
            bundle = pack(EXAMPLES / example)
            upload(s3, code_prefix(FAKE_VALUES["ArtifactBucket"], pipeline.settings.project), bundle)
            outcome = harness.run(
                pipeline_arn,
                {
                    "profile": REGISTRY_PROFILE,
                    "runName": f"trainstack-{example}",
                    "code": {"digest": bundle.digest, "entry": "train.py"},
                    "hyperparameters": hyperparameters,
                },
            )
            assert outcome.status == "SUCCEEDED", outcome.cause
            [listed] = sagemaker.list_model_packages(ModelPackageGroupName=REGISTRY_GROUP)[
                "ModelPackageSummaryList"
            ]
            version = sagemaker.describe_model_package(ModelPackageName=listed["ModelPackageArn"])
    finally:
        training.shutdown()
    assert reference.finish() == 0, reference.output()
    return outcome, fake, training, version, bundle.digest, reference.model_dir


def check_run(example, outcome, fake, training, version, digest, reference) -> float:
    """The checks common to both examples; the accuracy the gate approved."""
    run = f"trainstack-{example}"
    assert outcome.output["attempts"] == 2 and outcome.output["codeDigest"] == digest
    first, second = (fake.jobs[f"{run}-{attempt}"] for attempt in (1, 2))
    assert first.run.phase(first).failure_reason == CAPACITY_ERROR
    log = (training.root / "jobs" / f"{run}-2" / "ml" / "output" / "job.log").read_text()
    # The step-5 checkpoint, or the SIGTERM save of a step before the hang where the signal came first.
    resumed = re.search(r"Resumed from \S+ \(step (\d+)\)", log)
    assert resumed and CHECKPOINT_INTERVAL <= int(resumed[1]) < int(HANG["inject_hang_at_step"]), log[-3000:]
    # Resumed through the library's checkpoint: the weights of the run that never stopped, bit for bit.
    model = training.local_path(model_uri(second.request))
    assert max_weight_difference(load_weights(model), load_weights(reference)) == 0.0
    # The evaluation ran the team's evaluate_model.py from the run's bundle, and the gate read its accuracy.
    evaluation_job = fake.jobs[f"{run}-eval"].request
    evaluation = evaluation_job["HyperParameters"]
    assert evaluation["sagemaker_program"] == '"evaluate_model.py"'
    assert evaluation[SUBMIT] == second.request["HyperParameters"][SUBMIT]
    assert outcome.output["modelPackage"]["decision"] == "Approved"
    lineage = version["CustomerMetadataProperties"]
    assert lineage[LINEAGE_KEYS["teamCode"]] == digest
    accuracy = float(lineage["evaluation.accuracy"])
    written = json.loads((training.local_path(model_uri(evaluation_job)) / EVALUATION_FILE).read_text())
    assert abs(written[METRICS_KEY]["accuracy"]["value"] - accuracy) < 1e-6
    return accuracy


def test_the_image_classifier_resumes_after_a_capacity_loss_and_registers_on_its_own_accuracy(
    pipeline, monkeypatch, tmp_path
):
    images = generator("image-classifier", "make_images", "images")
    hyperparameters = {**STEPS, "learning_rate": "0.01"}
    result = run_example(
        pipeline, monkeypatch, tmp_path, "image-classifier", "images.pt", images, hyperparameters
    )
    accuracy = check_run("image-classifier", *result)
    assert accuracy > 0.5  # four classes: a guess scores 0.25


def test_the_hugging_face_trainer_resumes_after_a_capacity_loss_and_registers_on_its_own_accuracy(
    pipeline, monkeypatch, tmp_path
):
    sequences = generator("hf-trainer", "make_sequences", "sequences")
    hyperparameters = STEPS
    result = run_example(
        pipeline, monkeypatch, tmp_path, "hf-trainer", "sequences.pt", sequences, hyperparameters
    )
    accuracy = check_run("hf-trainer", *result)
    assert accuracy > 0.1  # 32 tokens: a guess scores about 0.03
