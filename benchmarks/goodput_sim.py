"""The goodput model against a Monte-Carlo run, and the chosen checkpoint interval against a sweep of others,
side by side: runs under exponential failures booked by the goodput ledger's own accounting
(trainstack/planning/simulation.py), billed and wall-clock, with restarts that can fail.

    python benchmarks/goodput_sim.py [--failures 2000] [--seed 1]

For the 7b and 70b presets on ml.p5.48xlarge at 16, 256, 1,024 and 16,384 GPUs where they fit
(setups.forecast_setup, async saves, Llama 3's per-GPU failure rate and no other interruption: the
simulation draws failures only), in two configurations: today's
(`sagemaker-sync`, every failure a new job) and the best store with in-job recovery. For each: the chosen
interval (planning/forecast.py, the exact optimum), the formula's billed and wall-clock goodput there, the
simulated ones, and a sweep of intervals from 1/8 to 8 times the chosen one, each simulated over the same
failure draws (common random numbers); the best swept interval and the ratio chosen / best swept
(wall-clock). A run is as long as `--failures` expected failures. An interval shorter than an async save's
background write waits for it: the wait adds to the blocking time.
"""

from __future__ import annotations

import argparse

from trainstack.fault_model import FaultModel
from trainstack.instances import INSTANCE_TYPES
from trainstack.planning.forecast import SCALES, Costs, Forecast, best_store, forecast
from trainstack.planning.plans import plan
from trainstack.planning.setups import forecast_setup
from trainstack.planning.simulation import Scenario, simulate, wall_clock_percent

INSTANCE = "ml.p5.48xlarge"
SWEEP = (1 / 8, 1 / 4, 1 / 2, 3 / 4, 1, 4 / 3, 2, 4, 8)
FAILURES = FaultModel().failures_only()  # what the simulation draws


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", type=int, default=2000, help="run length in expected failures")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def blocking(costs: Costs, steps: int) -> float:
    """An async save's blocking time, plus the wait for the previous write when the interval is shorter."""
    if not costs.asynchronous:
        return costs.save_blocking
    return costs.save_blocking + max(0.0, costs.save_write - steps * costs.step)


def simulated(result: Forecast, steps: int, failures: int, seed: int) -> tuple[float, float]:
    """(billed, wall-clock) simulated goodput % at `steps`, over `failures` expected failures."""
    costs = result.costs
    scenario = Scenario(
        step=costs.step,
        save=blocking(costs, steps),
        restart=costs.restart,
        mtbf=result.mtbf_seconds,
        work=failures * result.mtbf_seconds * result.wall_clock.kept,
        durable_after=costs.durable_after,
        restarts=costs.restarts(),
    )
    ledger = simulate(scenario, steps, seed)
    return ledger.goodput_percent, wall_clock_percent(ledger)


def sweep(result: Forecast) -> list[int]:
    chosen = result.goodput.interval_steps
    return sorted({max(1, round(chosen * factor)) for factor in SWEEP})


def row(preset: str, gpus: int, name: str, result: Forecast, args: argparse.Namespace) -> tuple[str, float]:
    chosen = result.goodput.interval_steps
    billed, wall = simulated(result, chosen, args.failures, args.seed)
    swept = {steps: simulated(result, steps, args.failures, args.seed)[1] for steps in sweep(result)}
    best = max(swept, key=swept.get)
    ratio = wall / swept[best]
    text = (
        f"{preset:>5} {gpus:>7,} {name:>22} {f'{chosen:,}':>7} {result.goodput.percent:>7.2f} {billed:>7.2f} "
        f"{result.wall_clock.percent:>7.2f} {wall:>7.2f} {f'{best:,}':>7} {swept[best]:>7.2f} {ratio:>7.4f}"
    )
    return text, ratio


def main(argv=None) -> int:
    args = parse_args(argv)
    spec = INSTANCE_TYPES[INSTANCE]
    print(f"goodput % on {INSTANCE}, {args.failures} expected failures per run, seed {args.seed}")
    print(
        f"{'preset':>5} {'GPUs':>7} {'store, recovery':>22} {'chosen':>7} {'billed':>7} {'sim':>7} "
        f"{'wall':>7} {'sim':>7} {'best':>7} {'its sim':>7} {'ratio':>7}"
    )
    worst = None
    for preset in ("7b", "70b"):
        for gpus in SCALES:
            item = plan(forecast_setup(preset), spec, gpus // spec.gpus, None)
            if not item.fits:
                print(f"{preset:>5} {gpus:>7,} does not fit")
                continue
            today = forecast(item, FAILURES, asynchronous=True)
            fastest = best_store(item, FAILURES, asynchronous=True, in_job=True)
            for name, result in (
                ("sagemaker-sync, new job", today),
                (f"{fastest.costs.store}, in-job", fastest),
            ):
                text, ratio = row(preset, gpus, name, result, args)
                worst = ratio if worst is None else min(worst, ratio)
                print(text)
    print(f"lowest ratio chosen / best swept (wall-clock, simulated): {worst:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
