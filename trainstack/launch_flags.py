"""How a profile's job is launched: the SageMaker training toolkit's flags and the environment that
trainstack sets (trainstack.job_request.launch_hyperparameters), which profiles and execution inputs may
therefore not set themselves."""

from __future__ import annotations

from typing import Literal

from trainstack.planning.checkpoints import MPIRUN_SIGKILL_TIMEOUT_SECONDS

Strategy = Literal["smp", "smddp", "torchrun", "mpi"]

# Hyperparameters the profile's strategy sets (the SageMaker toolkit's launch flags and train.py's
# --strategy): profiles and execution inputs may not set them.
RESERVED_HYPERPARAMETERS = (
    "sagemaker_program",
    # A team's own code: set from the execution's `code` only (trainstack.team_code).
    "sagemaker_submit_directory",
    "sagemaker_torch_distributed_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_mpi_enabled",
    "sagemaker_mpi_num_of_processes_per_host",
    "mp_parameters",
    "sagemaker_mpi_custom_mpi_options",
    "sagemaker_distributed_dataparallel_custom_mpi_options",
    "strategy",
    # Where train.py checkpoints: set from the profile's checkpoint_store (trainstack.job_request).
    "checkpoint_dir",
    "checkpoint_dir_shared",
    # Set from the execution's resumeFrom where train.py reads it directly (trainstack.job_request).
    "resume_from",
)
# Extra mpirun options, per the toolkit's hyperparameter for each MPI launcher (sagemaker-training
# runner.py: SMDDP reads its own name, MPI the other): the ranks' stop grace (MPIRUN_SIGKILL_TIMEOUT_SECONDS).
MPIRUN_STOP_OPTIONS = f"--mca odls_base_sigkill_timeout {MPIRUN_SIGKILL_TIMEOUT_SECONDS}"
# Environment variables trainstack sets on every job.
EXPECTED_GPUS_ENV = "TRAINSTACK_EXPECTED_GPUS"
