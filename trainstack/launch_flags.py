"""How a profile's job is launched: the SageMaker training toolkit's flags each strategy sets (hyperparameters
and environment), which profiles and execution inputs may therefore not set themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from trainstack.planning.checkpoints import MPIRUN_SIGKILL_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from trainstack.profiles import Profile

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


def launch_hyperparameters(profile: Profile) -> dict[str, Any]:
    """The SageMaker toolkit's launch flags of `profile` (and train.py's --strategy and slow-host flags),
    before JSON encoding."""
    flags: dict[str, Any] = {"sagemaker_program": profile.entry_point}
    if profile.strategy in ("torchrun", "smp"):
        flags["sagemaker_torch_distributed_enabled"] = True
    if profile.strategy == "smp":  # unset keys keep SMP's defaults
        flags["mp_parameters"] = profile.smp.as_mp_parameters() if profile.smp else {}
    if profile.strategy == "smddp":
        flags["sagemaker_distributed_dataparallel_enabled"] = True
        flags["sagemaker_distributed_dataparallel_custom_mpi_options"] = MPIRUN_STOP_OPTIONS
    if profile.strategy == "mpi":
        flags["sagemaker_mpi_enabled"] = True
        flags["sagemaker_mpi_num_of_processes_per_host"] = profile.processes_per_host
        flags["sagemaker_mpi_custom_mpi_options"] = MPIRUN_STOP_OPTIONS
    else:
        flags["strategy"] = profile.strategy
    if profile.slow_host is not None:
        flags.update(profile.slow_host.hyperparameters())
    return flags
