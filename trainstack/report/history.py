"""The account's own failure rate, for `trainstack plan --from-history`: infrastructure-classified job
failures (trainstack.faults) per billed GPU-hour (the goodput ledger's billed time x the GPUs of the type
each training job ran on, in queue mode every one Batch started), over the pipeline's newest executions.

Under the fault model (exponential failures at a rate proportional to the GPUs a job holds), failures /
GPU-hours is the maximum-likelihood estimate of the per-GPU rate, its inverse the per-GPU MTBF. Capacity
failures, user faults and stops are no interruptions of running hardware and are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainstack.faults import INFRASTRUCTURE, classify
from trainstack.instances import INSTANCE_TYPES
from trainstack.report.collect import RunReport, collect
from trainstack.report.goodput import ledger_of
from trainstack.runs import clock

# Newest executions read by --from-history (each costs its histories, job descriptions and log reads).
HISTORY_EXECUTIONS = 100


@dataclass(frozen=True)
class FailureHistory:
    runs: int  # executions with billed time
    attempts: int  # attempts with billed time
    failures: int  # infrastructure-classified
    gpu_hours: float

    @property
    def gpu_mtbf_hours(self) -> float | None:
        return self.gpu_hours / self.failures if self.failures else None

    def sentence(self) -> str:
        base = (
            f"from history: {self.failures} infrastructure failure(s) in {self.gpu_hours:,.1f} "
            f"billed GPU-hours over {self.runs} run(s) ({self.attempts} attempt(s))"
        )
        if self.gpu_mtbf_hours is None:
            return base + ": no failure to estimate a rate from, the fault model stays as configured"
        return base + f": per-GPU MTBF {self.gpu_mtbf_hours:,.0f} h"


def failure_history(reports: Iterable[RunReport]) -> FailureHistory:
    runs = attempts = failures = 0
    gpu_hours = 0.0
    for report in reports:
        ledger = ledger_of(report, clock())
        billed = [
            (attempt, entry)
            for attempt, entry in zip(report.training_jobs, ledger.attempts, strict=True)
            if entry.billed_ms
        ]
        runs += bool(billed)
        attempts += len({attempt.number for attempt, _ in billed})
        for attempt, entry in billed:
            spec = INSTANCE_TYPES.get(attempt.instance_type or "")
            gpu_hours += entry.billed_ms * entry.instance_count * (spec.gpus if spec else 0) / 3_600_000
            failures += (
                attempt.status == "Failed"
                and attempt.classification != "capacity"
                and (classify(attempt.job.get("FailureReason")).fault_class == INFRASTRUCTURE)
            )
    return FailureHistory(runs, attempts, failures, gpu_hours)


def pipeline_history(pipeline: Any, limit: int = HISTORY_EXECUTIONS) -> FailureHistory:
    """failure_history of the pipeline's newest `limit` executions (ListExecutions, newest first)."""
    stepfunctions = pipeline.client("stepfunctions")
    pages = stepfunctions.get_paginator("list_executions").paginate(
        stateMachineArn=pipeline.state_machine_arn
    )
    listed = [item for page in pages for item in page["executions"]][:limit]

    def reports() -> Iterable[RunReport]:
        for item in listed:
            execution = stepfunctions.describe_execution(executionArn=item["executionArn"])
            yield collect(
                stepfunctions,
                pipeline.client("sagemaker"),
                pipeline.client("logs"),
                execution,
                pipeline.runs.project,
                pipeline.batch(),
                pipeline.queue_name,
            )

    return failure_history(reports())
