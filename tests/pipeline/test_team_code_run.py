"""A team's own plain script (no trainstack library: a few lines of torch that write a model file) run end
to end by the synthesized machines on the virtual clock, as `trainstack start --code DIR --entry fit.py`
starts it: the bundle is packed and uploaded by digest, the first job loses its capacity while Starting and
the pipeline retries it as it retries train.py, the next job runs fit.py from the uploaded bundle through
SageMaker's training toolkit (localaws.sagemaker.local_processes), and the run's output and its model
version name the digest."""

from __future__ import annotations

import textwrap
import threading
from dataclasses import dataclass
from typing import Any

import boto3

from localaws.sagemaker.local_processes import LocalRun, LocalTraining
from localaws.sagemaker.scripted import CAPACITY_ERROR, ScriptedRun, evaluated, evaluates
from localaws.sagemaker.training_jobs import FakeSageMaker, TrainingJob, model_uri
from tests.pipeline import harness
from tests.pipeline.conftest import FAKE_VALUES, REGISTRY_GROUP, REGISTRY_PROFILE, deploy_registry_resources
from trainstack.registry import LINEAGE_KEYS
from trainstack.team_code import code_prefix, pack, upload

PLAIN_SCRIPT = """\
import os

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
if int(os.environ.get("RANK", "0")) == 0:
    torch.save(model.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
print(f"plain script done on rank {os.environ['RANK']}", flush=True)
"""
# The longest a real job of the plain script may take (the toolkit, torchrun and two ranks importing torch).
JOB_SECONDS = 300


@dataclass
class EndedFirst:
    """A local job whose DescribeTrainingJob answers once its processes ended: the virtual clock would
    otherwise run through the run's time limit while the real processes start."""

    run: LocalRun

    def phase(self, job: TrainingJob):
        ended = threading.Event()
        for _ in range(JOB_SECONDS * 10):
            if self.run.ended is not None:
                break
            ended.wait(0.1)
        return self.run.phase(job)

    def stop(self, job: TrainingJob) -> None:
        self.run.stop(job)


@dataclass
class TeamCodeJobs:
    """Training jobs run by `training`; evaluation jobs scripted (the image's evaluate.py reads a causal LM,
    which a plain script's model file is not)."""

    training: LocalTraining

    def start(self, job: TrainingJob) -> Any:
        if evaluates(job):
            return ScriptedRun(evaluated(1.5))
        run = self.training.start(job)
        return EndedFirst(run) if isinstance(run, LocalRun) else run


def test_a_plain_script_is_retried_on_capacity_runs_from_its_bundle_and_its_version_names_the_digest(
    pipeline, monkeypatch, tmp_path
):
    code = tmp_path / "team-code"
    code.mkdir()
    (code / "fit.py").write_text(textwrap.dedent(PLAIN_SCRIPT))
    dataset = tmp_path / "dataset"
    (dataset / "train").mkdir(parents=True)
    training = LocalTraining(tmp_path / "emulator", dataset, provisioning_failures=1)
    fake = FakeSageMaker(behaviour=TeamCodeJobs(training))
    with harness.pipeline_environment(fake, monkeypatch):
        deploy_registry_resources(pipeline.settings)
        harness.create_state_machine(pipeline.manifest_definition, "trainstack-dataset-manifest")
        harness.create_state_machine(pipeline.attempt_definition, "trainstack-pipeline-attempt")
        harness.create_state_machine(pipeline.cleanup_definition, "trainstack-job-cleanup")
        harness.create_state_machine(pipeline.registration_definition, "trainstack-pipeline-registration")
        pipeline_arn = harness.create_state_machine(pipeline.training_definition, "trainstack-pipeline")
        s3 = boto3.client("s3")
        artifacts = FAKE_VALUES["ArtifactBucket"]
        s3.create_bucket(Bucket=artifacts)
        bundle = pack(code)
        prefix = code_prefix(artifacts, pipeline.settings.project)
        uri, uploaded = upload(s3, prefix, bundle)
        assert (uri, uploaded) == (
            f"s3://{artifacts}/code/trainstack/{bundle.digest}/sourcedir.tar.gz",
            True,
        )
        assert upload(s3, prefix, pack(code)) == (
            uri,
            False,
        )  # the same tree: the same digest, not sent again
        outcome = harness.run(
            pipeline_arn,
            {
                "profile": REGISTRY_PROFILE,
                "runName": "trainstack-plain",
                "code": {"digest": bundle.digest, "entry": "fit.py"},
            },
        )
        versions = boto3.client("sagemaker").list_model_packages(ModelPackageGroupName=REGISTRY_GROUP)
        version = boto3.client("sagemaker").describe_model_package(
            ModelPackageName=versions["ModelPackageSummaryList"][0]["ModelPackageArn"]
        )
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert outcome.output["attempts"] == 2
    assert outcome.output["codeDigest"] == bundle.digest
    first, second = (fake.jobs[f"trainstack-plain-{attempt}"] for attempt in (1, 2))
    assert first.run.phase(first).failure_reason == CAPACITY_ERROR
    log = (training.root / "jobs" / "trainstack-plain-2" / "ml" / "output" / "job.log").read_text()
    assert "torchrun --nnodes 1 --nproc_per_node 2 fit.py" in log  # the profile's launcher, the team's entry
    assert "plain script done on rank 0" in log and "plain script done on rank 1" in log, log[-3000:]
    assert (training.local_path(model_uri(second.request)) / "model.pt").is_file()
    # The evaluation runs the image's evaluate.py, never the team's bundle.
    evaluation = fake.jobs["trainstack-plain-eval"].request["HyperParameters"]
    assert "sagemaker_submit_directory" not in evaluation
    assert evaluation["sagemaker_program"] == '"evaluate.py"'
    lineage = version["CustomerMetadataProperties"]
    assert lineage[LINEAGE_KEYS["teamCode"]] == bundle.digest
    assert lineage[LINEAGE_KEYS["run"]] == "trainstack-plain"
