"""tokens/s and MFU count training steps only: not validation, checkpoint saves or the warm-up steps.

The in-process runs drive train.py's step timer with a virtual clock that advances only where the test
says (each step, each save, each validation), so the figures are exact whatever the machine's load.
"""

from __future__ import annotations

import functools
import re

import distributed  # noqa: E402  (training_scripts/ is on sys.path, as in /opt/ml/code)
import metrics  # noqa: E402
import pytest
import torch
import train  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.training.harness import TRAIN_FLAGS, run_dirs
from tests.training.harness import train as train_torchrun
from training_scripts.metrics import WARMUP_STEPS, StepTimer, format_train_line, parse_metrics, throughput
from training_scripts.model_shapes import PEAK_BF16_FLOPS, peak_bf16_flops
from training_scripts.tensorboard_scalars import TOKENS_PER_SECOND

SEQ_LEN, MICRO_BATCH, GRAD_ACCUM = 32, 2, 2
TOKENS_PER_STEP = SEQ_LEN * MICRO_BATCH * GRAD_ACCUM  # one rank
STEP_SECONDS, WARMUP_STEP_SECONDS, SAVE_SECONDS, VALIDATION_SECONDS = 1.0, 50.0, 1000.0, 500.0


class VirtualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rates_by_step(output: str) -> dict[int, float | None]:
    """tokens_per_sec of every train line by step; None where the line has none."""
    rates = {}
    for step, rest in re.findall(r"step=(\d+)/\d+ train_loss=(.*)", output):
        rate = re.search(r"tokens_per_sec=([0-9.]+)", rest)
        rates[int(step)] = float(rate.group(1)) if rate else None
    return rates


@pytest.fixture
def slow_world(monkeypatch):
    """train.py on a virtual clock: the first WARMUP_STEPS steps of each run take 50 s, the others 1 s
    (except those listed in `slow_steps`), each checkpoint save and each wait for an async one 1,000 s,
    each validation 500 s."""
    clock = VirtualClock()
    slow_steps: dict[int, float] = {}
    calls = {"steps": 0}
    monkeypatch.setattr(train, "StepTimer", functools.partial(StepTimer, clock=clock))
    original_step = train.Trainer.train_step
    original_save, original_wait = train.CheckpointManager.save, train.CheckpointManager.wait
    original_validation = train.Trainer.validation_loss

    def train_step(self, step):
        result = original_step(self, step)
        calls["steps"] += 1
        warm = calls["steps"] <= WARMUP_STEPS
        clock.now += WARMUP_STEP_SECONDS if warm else slow_steps.get(step + 1, STEP_SECONDS)
        return result

    def save(self, *args, **kwargs):
        clock.now += SAVE_SECONDS
        return original_save(self, *args, **kwargs)

    def wait(self):
        if self._pending:  # the blocking part of an async save
            clock.now += SAVE_SECONDS
        return original_wait(self)

    def validation_loss(self):
        clock.now += VALIDATION_SECONDS
        return original_validation(self)

    monkeypatch.setattr(train.Trainer, "train_step", train_step)
    monkeypatch.setattr(train.CheckpointManager, "save", save)
    monkeypatch.setattr(train.CheckpointManager, "wait", wait)
    monkeypatch.setattr(train.Trainer, "validation_loss", validation_loss)

    def run(capsys, dataset, out, *flags: str) -> str:
        calls["steps"] = 0  # a new process: its warm-up starts again
        code = train.main([*TRAIN_FLAGS, *run_dirs(dataset, out), *flags])
        captured = capsys.readouterr()
        assert code == 0, captured.out + captured.err
        return captured.out + captured.err

    run.slow_steps, run.clock, run.monkeypatch = slow_steps, clock, monkeypatch
    return run


def test_slow_saves_validation_and_warm_up_do_not_lower_tokens_per_second(
    slow_world, dataset, tmp_path, capsys
):
    slow_world.slow_steps[7] = 10.0  # a slow step is seen: the metric is not blind
    board = tmp_path / "tensorboard"
    common = ("--log-interval", "2", "--checkpoint-interval", "4", "--val-interval", "4")
    first = slow_world(
        capsys, dataset, tmp_path, *common, "--async-checkpoint", "true", "--max-steps", "12",
        "--tensorboard-dir", str(board / "1"),
    )  # fmt: skip
    steady = TOKENS_PER_STEP / STEP_SECONDS
    assert "Saved checkpoint" in first and "val_loss=" in first
    assert rates_by_step(first) == {
        2: None,  # steps 1-2: warm-up only, no figure
        4: steady,  # step 3 is warm-up; the save and validation after step 4 are not counted
        6: steady,  # the wait for step 4's async save and step 4's validation fall in this interval
        8: round(2 * TOKENS_PER_STEP / (10.0 + STEP_SECONDS), 1),  # steps 7 (slow) and 8; printed .1f
        10: steady,
        12: steady,
    }
    written = EventAccumulator(str(board / "1"))
    written.Reload()
    logged = {step: rate for step, rate in rates_by_step(first).items() if rate is not None}
    assert {event.step: round(event.value, 1) for event in written.Scalars(TOKENS_PER_SECOND)} == logged

    # A resume from step 8 (synchronous saves): its first WARMUP_STEPS steps are left out again.
    resumed = slow_world(capsys, dataset, tmp_path, *common, "--max-steps", "16")
    assert "(step 8)" in resumed
    assert rates_by_step(resumed) == {10: None, 12: steady, 14: steady, 16: steady}


class VirtualDevice:
    """A GPU as the host sees it: queued work finishes only when the host waits for it (a synchronize, or a
    host copy of a result: Tensor.cpu, Tensor.item), and the wait advances the virtual clock."""

    def __init__(self, clock: VirtualClock):
        self.clock, self.queued = clock, 0.0

    def enqueue(self, seconds: float) -> None:
        self.queued += seconds

    def wait(self) -> None:
        self.clock.now += self.queued
        self.queued = 0.0


def test_a_step_is_timed_until_the_optimizers_device_work_has_finished(slow_world, dataset, tmp_path, capsys):
    """AdamW's kernels run after the host has queued them: a step's time must include them. Before the
    timer synchronized the device, the host copy of loss and gradient norm after the step waited for them,
    outside the timed window, and tokens/s came out as if the optimizer took no time."""
    device, optimizer_seconds = VirtualDevice(slow_world.clock), 3.0
    monkeypatch = slow_world.monkeypatch
    original_step, original_cpu, original_item = torch.optim.AdamW.step, torch.Tensor.cpu, torch.Tensor.item

    def optimizer_step(self, *args, **kwargs):
        result = original_step(self, *args, **kwargs)
        device.enqueue(optimizer_seconds)
        return result

    def waiting(original):
        def host_copy(self, *args, **kwargs):
            device.wait()
            return original(self, *args, **kwargs)

        return host_copy

    monkeypatch.setattr(torch.optim.AdamW, "step", optimizer_step)
    monkeypatch.setattr(torch.Tensor, "cpu", waiting(original_cpu))
    monkeypatch.setattr(torch.Tensor, "item", waiting(original_item))
    monkeypatch.setattr(distributed.Runtime, "synchronize", lambda _runtime: device.wait(), raising=False)
    output = slow_world(capsys, dataset, tmp_path, "--log-interval", "2", "--max-steps", "8")
    with_optimizer = TOKENS_PER_STEP / (STEP_SECONDS + optimizer_seconds)
    assert rates_by_step(output) == {2: None, 4: with_optimizer, 6: with_optimizer, 8: with_optimizer}


def test_the_timer_counts_only_what_runs_inside_timed_steps_after_warm_up():
    clock = VirtualClock()
    timer = StepTimer(warmup_steps=2, clock=clock)
    for seconds in (30.0, 20.0, 2.0, 4.0):
        with timer.timed():
            clock.now += seconds
        clock.now += 100.0  # between steps: validation, saves, logging
    assert timer.take() == (2, 6.0)
    assert timer.take() == (0, 0.0)
    assert throughput(1000, 2, 6.0, 6e9, 2e12) == (pytest.approx(333.33, rel=1e-4), pytest.approx(1.0))
    assert throughput(1000, 2, 6.0, 6e9, None) == (pytest.approx(333.33, rel=1e-4), None)
    assert throughput(1000, 0, 0.0, 6e9, 2e12) == (None, None)
    assert metrics.format_train_line(2, 10, 1.0, 0.5, 1e-3, None, None).endswith("lr=1.000e-03")


def test_a_real_two_rank_run_prints_the_figure_once_warm_up_is_over(dataset, tmp_path):
    run = train_torchrun(
        dataset, tmp_path, "--max-steps", "6", "--log-interval", "1", "--checkpoint-interval", "3"
    )
    assert run.returncode == 0, run.output
    rates = rates_by_step(run.output)
    assert sorted(rates) == [1, 2, 3, 4, 5, 6]
    assert [step for step, rate in rates.items() if rate is None] == list(range(1, WARMUP_STEPS + 1))
    assert all(rates[step] > 0 for step in range(WARMUP_STEPS + 1, 7))
    assert parse_metrics(run.output)["train:tokens_per_second"] == [rates[step] for step in (4, 5, 6)]


@pytest.mark.parametrize(
    "device_name, part, tflops",
    [
        ("NVIDIA H200", "H200 SXM", 989),
        ("NVIDIA H200 NVL", "H200 NVL", 835),  # was taken for an SXM part (989): MFU about 16 % too low
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA H100 NVL", "H100 NVL", 835),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4", 312),
    ],
)
def test_the_mfu_peak_is_the_exact_parts_and_the_line_names_it(device_name, part, tflops):
    assert peak_bf16_flops(device_name) == (part, tflops * 1e12)
    line = format_train_line(10, 100, 2.5, 1.2, 3e-4, 1000.0, 0.4123, peak_bf16_flops(device_name))
    assert line.endswith(f"mfu_pct=41.23 mfu_peak={part.replace(' ', '_')}:{tflops}TFLOPS"), line
    assert parse_metrics(line)["train:mfu_percent"] == [41.23]


def test_a_gpu_without_a_listed_peak_gets_no_mfu_and_instances_get_their_sxm_part():
    # A family name inside another part's name is not that part (GH200's "H200", an unlisted H100 variant).
    assert peak_bf16_flops("NVIDIA GH200 480GB") is None
    assert peak_bf16_flops("NVIDIA H100 SXM5 64GB") is None
    assert PEAK_BF16_FLOPS["H100"] == PEAK_BF16_FLOPS["H200"] == 989e12  # p5, p5e/p5en: SXM parts
