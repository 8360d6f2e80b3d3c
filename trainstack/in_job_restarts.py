"""A profile's `in_job_restarts:` block: how often torchrun restarts the workers inside the same job after a
fault that leaves the instances healthy (a hang, an NCCL/EFA or network error, a worker crash), before the
job fails for the pipeline's retry (docs/faults.md, "In-job restarts"; training_scripts/in_job_restart.py).

torchrun starts SMP v2 and torchrun profiles (sagemaker-training 5.1.4 torch_distributed.py) and reads
`--max-restarts` from PET_MAX_RESTARTS when the command does not name it (torch/distributed/argparse_util.py),
which the toolkit's command never does: the job's Environment carries it. mpirun (smddp, mpi) has no such
restart (an MPI job ends when a rank does): those profiles cannot set the block.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from trainstack.base import StrictModel

MAX_RESTARTS_ENV = "PET_MAX_RESTARTS"
TORCHRUN_STRATEGIES = ("torchrun", "smp")
# Two restarts: a hang or an NCCL error is usually one event; a third in one job points at the instances,
# which only a new job (the pipeline's fault retry) replaces. Each restart costs a process start, the
# rendezvous and the checkpoint load, no provisioning (assumed default; the planner models the figure).
DEFAULT_MAX_RESTARTS = 2


class InJobRestartPolicy(StrictModel):
    max_restarts: Annotated[int, Field(ge=0, le=10)] = DEFAULT_MAX_RESTARTS


def in_job_restart_environment(strategy: str, policy: InJobRestartPolicy | None) -> dict[str, str]:
    """The job's environment for torchrun's restarts: profiles that torchrun launches get the policy's
    budget (the default without a block), the others nothing."""
    if strategy not in TORCHRUN_STRATEGIES:
        return {}
    return {MAX_RESTARTS_ENV: str((policy or InJobRestartPolicy()).max_restarts)}
