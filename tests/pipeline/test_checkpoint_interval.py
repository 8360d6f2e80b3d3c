"""`checkpoint_interval: auto` through the synthesized pipeline (local interpreter, virtual clock): attempt 1
gets the interval planned at synth; after its job failed for the infrastructure's fault, attempt 2 gets the
interval re-solved from what the job measured (DescribeTrainingJob's FinalMetricDataList)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from localaws.emulator import VirtualClock
from localaws.emulator.jsonata_engine import jsonata_evaluator
from localaws.sagemaker import COMPLETED, STARTING, TRAINING, Phase
from stacks.pipeline.checkpoint_interval import PAUSE_METRIC, SPEED_METRIC, refined_request_expression
from tests.pipeline import harness
from tests.pipeline.test_fault_drills import HANG
from trainstack.commands.common import Pipeline
from trainstack.planning.auto_interval import auto_interval, profile_forecasts
from trainstack.planning.goodput_model import best_interval
from trainstack.report.history import pipeline_history

PAUSE_SECONDS, TOKENS_PER_SECOND = 12.5, 80_000.0


def expected_interval(profile, step: float, pause: float, gpus: int) -> int:
    """The optimum against failures and the interruptions that lose work, within the profile's bound
    (trainstack.planning.forecast.forecast_with, as planned for the first preference)."""
    first = profile_forecasts(profile)[0]
    lossy = first.exposure.lossy_rate - first.exposure.failure_rate
    mtbf = 1 / (gpus / (profile.fault_model.gpu_mtbf * 3600) + lossy)
    room = first.exposure.max_seconds_without_checkpoint - first.costs.durable_after - pause
    return min(best_interval(step, pause, 0.0, mtbf).interval_steps, max(1, int(room // step)))


def measured(phase: Phase) -> Phase:
    """The phase with the final metric values SageMaker reads from the job's log (on 2 x ml.p5.48xlarge),
    billed for one hour."""
    metrics = [
        {"MetricName": PAUSE_METRIC, "Value": PAUSE_SECONDS, "Timestamp": 0},
        {"MetricName": SPEED_METRIC, "Value": TOKENS_PER_SECOND, "Timestamp": 0},
    ]
    start = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    fields = {"FinalMetricDataList": metrics, "TrainingStartTime": start, "TrainingEndTime": start + 3600}
    return Phase(phase.status, phase.secondary, phase.failure_reason, fields, True)


def intervals(sm) -> list[str]:
    return [job["HyperParameters"]["checkpoint_interval"] for job in sm.fake.created]


def test_auto_reaches_the_job_and_the_next_attempt_gets_the_measured_optimum(interpreter, pipeline):
    profile = pipeline.settings.profile("llama-7b-smp")
    sm = interpreter(job_scripts=[[STARTING, TRAINING, measured(HANG)], [STARTING, TRAINING, COMPLETED]])
    outcome = sm.run({"runName": "trainstack-auto"})
    assert outcome.status == "SUCCEEDED", outcome.cause
    # 7b on 16 GPUs: seq 4096 x micro-batch 2 per GPU per step.
    step = 4096 * 2 * 16 / TOKENS_PER_SECOND
    refined = expected_interval(profile, step, PAUSE_SECONDS, 16)
    assert intervals(sm) == [str(auto_interval(profile)), str(refined)]
    # plan --from-history: the hang is 1 infrastructure failure in 1 billed hour on 16 GPUs.
    history = pipeline_history(Pipeline(pipeline.settings, harness.REGION, sm.pipeline_arn))
    assert (history.runs, history.attempts, history.failures) == (1, 1, 1)
    assert history.gpu_mtbf_hours == pytest.approx(16.0)
    assert history.sentence() == (
        "from history: 1 infrastructure failure(s) in 16.0 billed GPU-hours over 1 run(s) (1 attempt(s)): "
        "per-GPU MTBF 16 h"
    )


def refine(settings, given: dict, metrics: list[dict], job_type: str = "ml.p5.48xlarge", count: int = 2):
    """The pipeline's expression evaluated as RunAttempt evaluates it (jsonata 2.0.6, as the emulator)."""
    outcome = {
        "status": "Failed",
        "job": {"instanceType": job_type, "instanceCount": count, "metrics": metrics},
    }
    bindings = {
        "states": {"result": {"Output": outcome}, "context": {"Execution": {"Input": given}}},
        "request": {"HyperParameters": {"checkpoint_interval": "7"}},
        "plan": {"profile": given.get("profile", "llama-7b-smp")},
    }
    result = jsonata_evaluator(VirtualClock())(refined_request_expression(settings.profiles), bindings)
    return result["HyperParameters"]["checkpoint_interval"]


@pytest.mark.parametrize(("pause", "speed", "count"), [(0.4, 2e6, 64), (40.0, 30_000.0, 2), (3.0, 9e5, 16)])
def test_the_state_machines_optimum_is_pythons(make_settings, pause, speed, count):
    settings = make_settings({"fault_model": {"gpu_mtbf_hours": 5_000}})
    metrics = [{"MetricName": PAUSE_METRIC, "Value": pause}, {"MetricName": SPEED_METRIC, "Value": speed}]
    step = 4096 * 2 * 8 * count / speed
    expected = expected_interval(settings.profile("llama-7b-smp"), step, pause, 8 * count)
    assert refine(settings, {}, metrics, count=count) == str(expected)


def test_the_refined_interval_stays_within_the_profiles_bound(make_settings):
    """Issue 49: after attempt 1 the pipeline re-solved the interval from failures alone (21,118 steps for
    the shipped 7b profile, 8.5 h): it now keeps fault_model.max_hours_without_checkpoint."""
    metrics = [{"MetricName": PAUSE_METRIC, "Value": 40.0}, {"MetricName": SPEED_METRIC, "Value": 90_000.0}]
    step = 4096 * 2 * 16 / 90_000.0
    for hours in (1, 0.25):
        settings = make_settings({"fault_model": {"max_hours_without_checkpoint": hours}})
        steps = int(refine(settings, {}, metrics))
        assert steps * step + 40.0 <= hours * 3600


def test_the_interval_stays_as_planned_without_measurements_or_when_the_run_sets_it(make_settings):
    settings = make_settings()
    metrics = [{"MetricName": PAUSE_METRIC, "Value": 5.0}, {"MetricName": SPEED_METRIC, "Value": 1e5}]
    assert refine(settings, {}, metrics) != "7"
    assert refine(settings, {}, metrics[:1]) == "7"  # no tokens/s
    assert refine(settings, {"hyperparameters": {"checkpoint_interval": "7"}}, metrics) == "7"
    assert refine(settings, {"hyperparameters": {"seq_len": "1024"}}, metrics) == "7"
    assert refine(settings, {"profile": "llama-1b-smddp"}, metrics) == "7"  # not auto
    assert refine(settings, {}, metrics, job_type="ml.c5.xlarge") == "7"  # not a preferred GPU type
