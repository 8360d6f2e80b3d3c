"""`checkpoint_interval: auto`, refined after each attempt from the job's measurements (docs/plan.md).

The synthesized request carries the interval planned at synth (trainstack.planning.auto_interval). After an
attempt whose job ran, the pipeline's RunAttempt state re-solves the same optimum
(trainstack.planning.goodput_model) with the job's own figures, from DescribeTrainingJob's
FinalMetricDataList (the last value of each of the request's MetricDefinitions, which SageMaker reads from
the job's log): the last checkpoint pause (`train:checkpoint_pause_seconds`, the save's blocking part,
what the goodput ledger books as checkpoint saving) and the step time (the tokens of one step, seq_len x
micro_batch_size x grad_accum x GPUs, over `train:tokens_per_second`), on the instance type and count the
job got. The next attempt's HyperParameters.checkpoint_interval is the result; `trainstack report` and
`status` print each attempt's interval and the measurements it came from.

Kept as planned: profiles without `auto`, runs whose input sets checkpoint_interval or a batch-shape
hyperparameter (seq_len, micro_batch_size, grad_accum: the step's tokens are the profile's), and attempts
whose job reported no pause or no tokens/s. The restart time needs no refinement: the optimum does not
depend on it (goodput_model's docstring). The interruptions that lose work (trainstack.planning.interruptions,
as planned for the first preference) add to the failures, and the interval stays within the profile's
fault_model.max_hours_without_checkpoint (less the planned time until a save is durable), as at synth.
"""

from __future__ import annotations

from collections.abc import Sequence

from stacks.pipeline.jsonata_text import expression, literal
from training_scripts.metrics import CHECKPOINT_PAUSE_METRIC as PAUSE_METRIC
from training_scripts.metrics import TOKENS_PER_SECOND_METRIC as SPEED_METRIC
from trainstack.planning.auto_interval import is_auto, profile_forecasts
from trainstack.planning.forecast import INTERVAL_HYPERPARAMETER
from trainstack.planning.setups import STEP_SHAPE, setup_for_profile
from trainstack.profiles import Profile

# Bisection steps over x = work / MTBF in (0, 1): 2^-60 of the MTBF.
_BISECTIONS = 60
_E = 2.718281828459045


def refinement_table(profiles: Sequence[Profile]) -> dict[str, dict]:
    """Per `auto` profile: per-GPU MTBF, the rate of interruptions that lose work (per second), tokens of one
    step per GPU, GPUs per preferred type, the shortest interval an async save allows (seconds of one node's
    write; 0 for synchronous saves) and the longest (the bound less the planned durability delay)."""
    table = {}
    for profile in profiles:
        if not is_auto(profile):
            continue
        setup = setup_for_profile(profile)
        first = profile_forecasts(profile)[0]
        table[profile.name] = {
            "gpuMtbfSeconds": profile.fault_model.gpu_mtbf * 3600,
            "lossyInterruptionsPerSecond": first.exposure.lossy_rate - first.exposure.failure_rate,
            "secondsWithoutCheckpoint": first.exposure.max_seconds_without_checkpoint
            - first.costs.durable_after,
            "tokensPerGpuStep": setup.seq_len * setup.micro_batch_size * setup.grad_accum,
            "gpus": {p.instance_type: p.spec.gpus for p in profile.instance_preferences if p.spec.gpus},
            "writeSeconds": first.costs.save_write if first and first.costs.asynchronous else 0,
        }
    return table


def refined_request_expression(profiles: Sequence[Profile], outcome: str = "$states.result.Output") -> str:
    """`$request` with the interval re-solved from the attempt's measurements, or unchanged."""
    table = refinement_table(profiles)
    if not table:
        return "$request"
    given = "$states.context.Execution.Input.hyperparameters"
    # A run that sets the interval or the step's shape keeps the planned interval.
    kept_as_given = " or ".join(f"$exists({given}.{name})" for name in (INTERVAL_HYPERPARAMETER, *STEP_SHAPE))
    return (
        f"($t := $lookup({literal(table)}, $plan.profile); $o := {outcome}; $m := $o.job.metrics; "
        f"$pause := ($m[MetricName = {literal(PAUSE_METRIC)}].Value)[0]; "
        f"$speed := ($m[MetricName = {literal(SPEED_METRIC)}].Value)[0]; "
        "$g := $lookup($t.gpus, $o.job.instanceType); "
        f"($exists($t) and $exists($pause) and $exists($speed) and $exists($g) and $not({kept_as_given}) "
        "and $pause > 0 and $speed > 0) ? ("
        "$mtbf := 1 / ($g * $o.job.instanceCount / $t.gpuMtbfSeconds + $t.lossyInterruptionsPerSecond); "
        "$step := $t.tokensPerGpuStep * $g * $o.job.instanceCount / $speed; "
        f"$e := function($y) {{ $power({_E}, $y) }}; "
        "$root := function($low, $high, $n) { $n = 0 ? ($low + $high) / 2 : ($mid := ($low + $high) / 2; "
        "($mid - 1) * $e($mid + $pause / $mtbf) + 1 < 0 ? $root($mid, $high, $n - 1) "
        ": $root($low, $mid, $n - 1)) }; "
        f"$ideal := $root(0, 1, {_BISECTIONS}) * $mtbf / $step; "
        "$least := $max([1, $ceil($t.writeSeconds / $step)]); "
        "$score := function($k) { $k / ($e(($k * $step + $pause) / $mtbf) - 1) }; "
        "$a := $max([$least, $floor($ideal)]); $b := $max([$least, $ceil($ideal)]); "
        "$most := $max([1, $floor(($t.secondsWithoutCheckpoint - $pause) / $step)]); "
        "$best := $min([$score($b) > $score($a) ? $b : $a, $most]); "
        '$merge([$request, {"HyperParameters": $merge([$request.HyperParameters, '
        f"{{{literal(INTERVAL_HYPERPARAMETER)}: $string($best)}}])}}])"
        ") : $request)"
    )


def refined_request(profiles: Sequence[Profile]) -> dict[str, str]:
    """RunAttempt's assignment of `request` (the hook in training_state_machine.py)."""
    return {"request": expression(refined_request_expression(profiles))}
