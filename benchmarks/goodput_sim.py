"""The chosen checkpoint interval against fixed ones, side by side: Monte-Carlo runs under exponential
failures, booked by the goodput ledger's own accounting (trainstack/planning/simulation.py).

    python benchmarks/goodput_sim.py [--failures 2000] [--seed 1]

For the 7b and 70b presets on ml.p5.48xlarge at 16, 256, 1,024 and 16,384 GPUs, with trainstack's defaults
(seq 4096, micro-batch 1, activation checkpointing, FSDP, async saves, keep 2 checkpoints, the planner's
step time, save and restart costs, Llama 3's per-GPU failure rate): the goodput of the chosen interval
(planning/forecast.py, the exact optimum) and of fixed intervals of 100 steps, 30 minutes and 2 hours, each
simulated over the same failure draws (common random numbers) for a run of `--failures` x the job's MTBF;
the formula's goodput of the chosen interval beside it; and the ratio chosen / best fixed.
An interval shorter than an async save's background write waits for it: the wait adds to the blocking time.
"""

from __future__ import annotations

import argparse

from training_scripts.model_shapes import PRESETS
from trainstack.fault_model import FaultModel
from trainstack.instances import INSTANCE_TYPES
from trainstack.planning.forecast import SCALES, Costs, Forecast, forecast
from trainstack.planning.plans import Setup, plan
from trainstack.planning.simulation import Scenario, simulate

INSTANCE = "ml.p5.48xlarge"
FIXED = (("100 steps", None), ("30 min", 1800.0), ("2 h", 7200.0))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", type=int, default=2000, help="run length in job MTBFs")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def default_setup(preset: str) -> Setup:
    return Setup(
        model=preset,
        shape=dict(PRESETS[preset]),
        seq_len=4096,
        micro_batch_size=1,
        grad_accum=1,
        activation_checkpointing=True,
        strategy="torchrun",
        parallelism="fsdp",
    )


def blocking(costs: Costs, steps: int) -> float:
    """An async save's blocking time, plus the wait for the previous write when the interval is shorter."""
    if not costs.asynchronous:
        return costs.save_blocking
    return costs.save_blocking + max(0.0, costs.save_write - steps * costs.step)


def goodput(result: Forecast, steps: int, failures: int, seed: int) -> float:
    costs = result.costs
    scenario = Scenario(
        step=costs.step,
        save=blocking(costs, steps),
        restart=costs.restart,
        mtbf=result.mtbf_seconds,
        work=failures * result.mtbf_seconds,
    )
    return simulate(scenario, steps, seed).goodput_percent


def main(argv=None) -> int:
    args = parse_args(argv)
    spec = INSTANCE_TYPES[INSTANCE]
    header = (
        f"{'preset':>6} {'GPUs':>7} {'MTBF h':>8} {'chosen':>14} {'formula':>8} {'sim':>7} "
        + " ".join(f"{name:>10}" for name, _ in FIXED)
        + f" {'chosen/best fixed':>18}"
    )
    print(f"goodput % on {INSTANCE}, {args.failures} MTBFs per run, seed {args.seed}")
    print(header)
    worst = None
    for preset in ("7b", "70b"):
        setup = default_setup(preset)
        for gpus in SCALES:
            item = plan(setup, spec, gpus // spec.gpus, None)
            result = forecast(item, FaultModel(), asynchronous=True)
            chosen = result.goodput.interval_steps
            fixed = [max(1, round(seconds / result.costs.step)) if seconds else 100 for _, seconds in FIXED]
            ours = goodput(result, chosen, args.failures, args.seed)
            theirs = [goodput(result, steps, args.failures, args.seed) for steps in fixed]
            ratio = ours / max(theirs)
            worst = ratio if worst is None else min(worst, ratio)
            print(
                f"{preset:>6} {gpus:>7,} {result.mtbf_seconds / 3600:>8,.1f} {f'{chosen:,} steps':>14} "
                f"{result.goodput.percent:>8.2f} {ours:>7.2f} "
                + " ".join(f"{value:>10.2f}" for value in theirs)
                + f" {ratio:>18.4f}"
            )
    print(f"lowest ratio chosen / best fixed: {worst:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
