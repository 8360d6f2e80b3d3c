"""A checkpoint of a train.py job at scale: its size, the time to write it, whether a SIGTERM save fits
before the kill, and what a new job downloads to every node under SageMaker's sync (docs/plan.md,
"Checkpoints"; the other stores' times: planning/stores.py).

What train.py saves (training_scripts/checkpoint.py): DCP shards of the fp32 weights and AdamW's two fp32
moments, 12 bytes per parameter in all, written once across the job (DCP spreads replicated tensors
over the ranks), so each node writes its share.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.planning.memory import OPTIMIZER_BYTES, WEIGHT_BYTES

GB = 10**9
CHECKPOINT_BYTES_PER_PARAMETER = WEIGHT_BYTES + OPTIMIZER_BYTES
# StopTrainingJob and spot reclaims: SIGTERM, then SIGKILL 120 s later (SageMaker); torchrun (strategies
# torchrun and smp) kills its workers 30 s after it gets SIGTERM itself (torch.distributed.elastic's
# default stop timeout).
SIGKILL_AFTER_SIGTERM_SECONDS = 120
TORCHRUN_WORKER_KILL_SECONDS = 30
# mpirun (strategies smddp and mpi; Open MPI 4's ORTE) stops its ranks in three steps, each after
# `odls_base_sigkill_timeout` seconds: SIGCONT, wait, SIGTERM, wait, SIGKILL (orte/mca/odls/base/
# odls_base_default_fns.c, orte_odls_base_default_kill_local_procs; default 1 s). Half of SageMaker's
# window gives the ranks the longest save that still ends before SageMaker's own SIGKILL: SIGTERM 60 s
# after mpirun's, SIGKILL at 120 s. The profiles send it as the toolkit's custom MPI options.
MPIRUN_SIGKILL_TIMEOUT_SECONDS = SIGKILL_AFTER_SIGTERM_SECONDS // 2
# Write rate of one node's checkpoint disk, assumed until measured there with
# benchmarks/checkpoint_throughput.py (which prints DCP's and the raw rate of the same disk); pass the
# measured DCP rate with `trainstack plan --checkpoint-write-rate`.
ASSUMED_WRITE_BYTES_PER_SECOND = 1 * GB


@dataclass(frozen=True)
class CheckpointPlan:
    size: int  # bytes, the whole checkpoint
    per_node: int  # bytes one node writes
    save_seconds: float  # one node's write at `write_rate`
    write_rate: float  # bytes/s per node
    sigterm_window_seconds: int
    step_seconds: float | None  # a training step finishes before the save starts; None: no throughput
    restart_download_per_node: int  # sagemaker-sync: the whole checkpoint prefix, to every node

    @property
    def sigterm_save_fits(self) -> bool | None:
        if self.step_seconds is None:
            return None
        return self.step_seconds + self.save_seconds <= self.sigterm_window_seconds

    def line(self) -> str:
        text = (
            f"checkpoint {self.size / GB:,.1f} GB ({self.per_node / GB:,.1f} GB per node, "
            f"{self.save_seconds:,.0f} s at {self.write_rate / GB:g} GB/s); "
        )
        window = f"the {self.sigterm_window_seconds} s between SIGTERM and the kill"
        if self.sigterm_save_fits is None:
            text += (
                f"SIGTERM save: step time unknown; the save alone takes {self.save_seconds:,.0f} s "
                f"of {window}"
            )
        elif self.sigterm_save_fits:
            text += f"SIGTERM save fits ({self.step_seconds + self.save_seconds:,.0f} s of {window})"
        else:
            text += (
                f"SIGTERM save does NOT fit ({self.step_seconds + self.save_seconds:,.0f} s, more than "
                f"{window}): a stop resumes from the last periodic checkpoint"
            )
        return (
            f"{text}; under sagemaker-sync a new job downloads {self.restart_download_per_node / GB:,.1f} GB "
            "to every node (the goodput forecast names the store that restores fastest)"
        )

    def as_dict(self) -> dict:
        return {
            "size_gb": round(self.size / GB, 3),
            "per_node_gb": round(self.per_node / GB, 3),
            "save_seconds": round(self.save_seconds, 1),
            "write_rate_gb_per_second": self.write_rate / GB,
            "sigterm_window_seconds": self.sigterm_window_seconds,
            "sigterm_save_fits": self.sigterm_save_fits,
            "restart_download_per_node_gb": round(self.restart_download_per_node / GB, 3),
        }


def plan_checkpoint(
    parameters: int,
    instance_count: int,
    strategy: str,
    keep_checkpoints: int,
    step_seconds: float | None,
    write_rate: float = ASSUMED_WRITE_BYTES_PER_SECOND,
) -> CheckpointPlan:
    size = CHECKPOINT_BYTES_PER_PARAMETER * parameters
    per_node = -(-size // instance_count)
    window = MPIRUN_SIGKILL_TIMEOUT_SECONDS if strategy == "smddp" else TORCHRUN_WORKER_KILL_SECONDS
    return CheckpointPlan(
        size=size,
        per_node=per_node,
        save_seconds=per_node / write_rate,
        write_rate=write_rate,
        sigterm_window_seconds=window,
        step_seconds=step_seconds,
        restart_download_per_node=keep_checkpoints * size,
    )
