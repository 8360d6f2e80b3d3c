"""`trainstack plan`'s checkpoint line: size, save time, whether a SIGTERM save fits, the sync's download."""

from tests.plan.test_plan_cli import run
from training_scripts.model_shapes import PRESETS, parameter_count
from trainstack.instances import instance_type
from trainstack.planning.checkpoints import GB, TORCHRUN_WORKER_KILL_SECONDS
from trainstack.planning.plans import Setup, plan
from trainstack.planning.setups import preset_shape


def setup(preset: str, strategy: str = "torchrun") -> Setup:
    return Setup(preset, preset_shape(preset), 4096, 1, 1, True, strategy, "fsdp")


def test_a_70b_checkpoint_is_828_gb_cannot_be_saved_after_sigterm_and_restarts_pull_twice_that():
    result = plan(setup("70b"), instance_type("ml.p5.48xlarge"), 8, None)
    checkpoint = result.checkpoint
    assert checkpoint.size == 12 * parameter_count(PRESETS["70b"])  # fp32 weights + AdamW's two moments
    assert round(checkpoint.size / GB) == 828 and checkpoint.per_node == checkpoint.size // 8
    assert checkpoint.sigterm_window_seconds == TORCHRUN_WORKER_KILL_SECONDS
    assert checkpoint.sigterm_save_fits is False
    assert checkpoint.restart_download_per_node == 2 * checkpoint.size  # --keep-checkpoints 2


def test_a_small_checkpoint_fits_the_sigterm_window_and_a_faster_disk_saves_faster():
    spec = instance_type("ml.g5.12xlarge")
    slow = plan(setup("125m"), spec, 1, None).checkpoint
    fast = plan(setup("125m"), spec, 1, None, checkpoint_write_rate=4 * GB).checkpoint
    assert slow.sigterm_save_fits
    assert fast.save_seconds == slow.save_seconds / 4


def test_the_cli_prints_the_checkpoint_line_per_preference_and_checks_the_rate(capsys):
    code, out, _ = run(capsys, "--profile", "llama-1b-smddp", "--checkpoint-write-rate", "2")
    lines = [line for line in out.splitlines() if line.strip().startswith("checkpoint ")]
    assert code == 0 and len(lines) == 2
    assert "at 2 GB/s); SIGTERM save fits" in lines[0] and "GB to every node" in lines[0]
    code, _, err = run(capsys, "--profile", "llama-1b-smddp", "--checkpoint-write-rate", "fast")
    assert code == 2
    assert err.startswith("trainstack plan: --checkpoint-write-rate must be a positive number of GB/s")
