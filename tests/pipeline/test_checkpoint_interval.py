"""`checkpoint_interval: auto` through the synthesized pipeline (local interpreter, virtual clock): attempt 1
gets the interval planned at synth; after its job failed for the infrastructure's fault, attempt 2 gets the
interval re-solved from what the job measured (DescribeTrainingJob's FinalMetricDataList)."""

from __future__ import annotations

from localaws.sagemaker import COMPLETED, STARTING, TRAINING, Phase
from stacks.pipeline.checkpoint_interval import PAUSE_METRIC, SPEED_METRIC
from tests.pipeline.test_fault_drills import HANG
from trainstack.planning.auto_interval import auto_interval
from trainstack.planning.goodput_model import best_interval

PAUSE_SECONDS, TOKENS_PER_SECOND = 12.5, 80_000.0


def measured(phase: Phase) -> Phase:
    """The phase with the final metric values SageMaker reads from the job's log (on 2 x ml.p5.48xlarge)."""
    metrics = [
        {"MetricName": PAUSE_METRIC, "Value": PAUSE_SECONDS, "Timestamp": 0},
        {"MetricName": SPEED_METRIC, "Value": TOKENS_PER_SECOND, "Timestamp": 0},
    ]
    return Phase(phase.status, phase.secondary, phase.failure_reason, {"FinalMetricDataList": metrics}, True)


def intervals(sm) -> list[str]:
    return [job["HyperParameters"]["checkpoint_interval"] for job in sm.fake.created]


def test_auto_reaches_the_job_and_the_next_attempt_gets_the_measured_optimum(interpreter, pipeline):
    profile = pipeline.settings.profile("llama-7b-smp")
    sm = interpreter(job_scripts=[[STARTING, TRAINING, measured(HANG)], [STARTING, TRAINING, COMPLETED]])
    outcome = sm.run({"runName": "trainstack-auto"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    # 7b on 16 GPUs: seq 4096 x micro-batch 2 per GPU per step.
    step = 4096 * 2 * 16 / TOKENS_PER_SECOND
    refined = best_interval(step, PAUSE_SECONDS, 0.0, profile.fault_model.job_mtbf_seconds(16))
    assert intervals(sm) == [str(auto_interval(profile)), str(refined.interval_steps)]


def test_a_run_that_sets_the_interval_keeps_it(interpreter):
    sm = interpreter(job_scripts=[[STARTING, TRAINING, measured(HANG)], [STARTING, TRAINING, COMPLETED]])
    outcome = sm.run({"runName": "trainstack-given", "hyperparameters": {"checkpoint_interval": "50"}})
    assert outcome.status == "SUCCEEDED", outcome.cause
    assert intervals(sm) == ["50", "50"]
