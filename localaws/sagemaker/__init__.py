"""One SageMaker for the tests and the demos: a model of training jobs (training_jobs.py) answering
behind moto (routes.py), its jobs run by a behaviour: scripted phases (scripted.py) or real local
training processes (local_processes.py). Needs moto, a dev dependency."""

from localaws.sagemaker.routes import install_fake_sagemaker
from localaws.sagemaker.scripted import (
    BILLED_TRAINING,
    CAPACITY_ERROR,
    CAPACITY_FAILURE,
    COMPLETED,
    SPOT_WAIT_EXCEEDED,
    STARTING,
    TRAINING,
    ScriptedJobs,
    evaluated,
    failed,
    scripted_sagemaker,
)
from localaws.sagemaker.training_jobs import ACCOUNT, FakeSageMaker, Phase, TrainingJob

__all__ = [
    "ACCOUNT",
    "BILLED_TRAINING",
    "CAPACITY_ERROR",
    "CAPACITY_FAILURE",
    "COMPLETED",
    "SPOT_WAIT_EXCEEDED",
    "STARTING",
    "TRAINING",
    "FakeSageMaker",
    "Phase",
    "ScriptedJobs",
    "TrainingJob",
    "evaluated",
    "failed",
    "install_fake_sagemaker",
    "scripted_sagemaker",
]
