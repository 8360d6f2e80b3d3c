"""What users feed train.py and prepare_data.py: flags, channels, data order, metrics lines."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import data  # noqa: E402  (training_scripts/ is on sys.path, as in /opt/ml/code)
import distributed  # noqa: E402
import numpy as np
import pytest
import train  # noqa: E402

from tests.training.harness import SCRIPTS, TRAIN_PY, write_learnable_shards
from training_scripts.metrics import METRIC_DEFINITIONS, format_train_line, format_val_line, parse_metrics


@pytest.fixture
def channels(tmp_path):
    write_learnable_shards(tmp_path / "train", 2_000, seed=1)
    (tmp_path / "empty").mkdir()
    for name, size in (("odd", 7), ("zero", 0)):  # an upload cut short, an empty file
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.bin").write_bytes(b"\1" * size)
    return tmp_path


def run_main(capsys, *flags: str) -> tuple[int, str]:
    code = train.main(list(flags))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--strategy", "mpi"],
            "Argument --strategy: invalid choice: 'mpi' (choose from smp, smddp, torchrun).",
        ),
        (
            ["--parallelism", "zero3"],
            "Argument --parallelism: invalid choice: 'zero3' (choose from fsdp, ddp).",
        ),
        (["--max_steps", "0"], "Argument --max-steps: expected a positive integer, got 0."),
        (
            ["--async_checkpoint", "maybe"],
            "Argument --async-checkpoint: expected true or false, got 'maybe'.",
        ),
        (["--mp_parameters", "[2]"], "Argument --mp-parameters: expected a JSON object or key=value pairs"),
        (["--mp_parameters", "tensor_parallel_degree"], "Argument --mp-parameters: expected a JSON object"),
        (
            ["--mp_parameters", "tensor_parallel_degree=2"],
            "Argument --mp-parameters: tensor_parallel_degree must be 1: train.py does not yet clip",
        ),
        (["--keep_checkpoints", "1"], "Argument --keep-checkpoints: expected an integer of at least 2 ("),
        (
            ["--strategy", "smddp", "--async_checkpoint", "true"],
            "Argument --async-checkpoint: must be false with --strategy smddp",
        ),
        (
            ["--learning_rat", "1e-3"],
            "Unknown flag --learning-rat; run train.py --help for the accepted flags.",
        ),
        (["--train-dir", "{tmp}/missing"], "The train channel directory {tmp}/missing does not exist"),
        (
            ["--train-dir", "{tmp}/empty"],
            "The train channel directory {tmp}/empty holds no *.bin token shards.",
        ),
        (["--val-dir", "{tmp}/empty"], "The val channel directory {tmp}/empty holds no *.bin token shards."),
        (["--init-from", "{tmp}/empty"], "--init-from {tmp}/empty holds no config.json."),
        (
            ["--resume-from", "{tmp}/empty", "--checkpoint-dir", "{tmp}/checkpoints"],
            "--resume-from {tmp}/empty holds no complete checkpoint: it must be a run's checkpoint dir",
        ),
        (
            # 7b's positions reach 4096: no warning about raising them precedes the error.
            ["--model-preset", "7b", "--seq-len", "4096"],
            "The train channel holds fewer than --seq-len + 1 = 4097 tokens per shard.",
        ),
        (["--learning-rate", "-1e-3"], "Argument --learning-rate: expected a number above 0, got -1e-3."),
        (["--learning-rate", "0"], "Argument --learning-rate: expected a number above 0, got 0."),
        (["--min-lr-ratio", "1.5"], "Argument --min-lr-ratio: expected a number from 0 to 1, got 1.5."),
        (["--warmup-steps", "-1"], "Argument --warmup-steps: expected 0 or a positive integer, got -1."),
        (["--grad-clip", "-1"], "Argument --grad-clip: expected a number of at least 0, got -1."),
        (
            ["--profile-steps", "5-2"],
            "Argument --profile-steps: expected a step or a range of steps such as 10-12",
        ),
        (
            ["--train-dir", "{tmp}/odd"],
            "The train shard {tmp}/odd/a.bin holds 7 bytes: a shard must hold whole",
        ),
        (
            ["--train-dir", "{tmp}/zero"],
            "The train shard {tmp}/zero/a.bin holds 0 bytes: a shard must hold whole",
        ),
        (
            ["--checkpoint-dir", "{tmp}/train/shard_00000.bin/checkpoints"],
            "--checkpoint-dir {tmp}/train/shard_00000.bin/checkpoints is not writable (Not a directory)",
        ),
        (
            ["--model-dir", "{tmp}/train/shard_00000.bin/model"],
            "--model-dir {tmp}/train/shard_00000.bin/model is not writable (Not a directory)",
        ),
    ],
)
def test_a_bad_flag_or_channel_ends_in_one_sentence_naming_it(channels, capsys, flags, message):
    flags = [flag.format(tmp=channels) for flag in flags]
    defaults = ["--model-preset", "tiny", "--seq-len", "32", "--train-dir", str(channels / "train")]
    defaults += ["--model-dir", str(channels / "model"), "--checkpoint-dir", str(channels / "checkpoints")]
    code, output = run_main(capsys, *defaults, *flags)
    assert code == 2
    [line] = output.strip().splitlines()
    # Python 3.12 stopped quoting argparse's choices: compare without quotes.
    assert message.format(tmp=channels).replace("'", "") in line.replace("'", "")


def test_no_train_channel_is_named(monkeypatch, capsys):
    monkeypatch.delenv("SM_CHANNEL_TRAIN", raising=False)
    code, output = run_main(capsys, "--model-preset", "tiny")
    assert code == 2
    assert (
        "No train channel: attach a channel named 'train' (SM_CHANNEL_TRAIN) or pass --train-dir." in output
    )


def test_a_resume_channel_without_a_complete_checkpoint_is_named(channels, monkeypatch, capsys):
    partial = channels / "resume" / "step_000000010"  # a save that never finished: no COMPLETE marker
    partial.mkdir(parents=True)
    monkeypatch.setenv("SM_CHANNEL_RESUME", str(channels / "resume"))
    code, output = run_main(
        capsys, "--train-dir", str(channels / "train"), "--checkpoint-dir", str(channels / "checkpoints")
    )
    assert code == 2
    [line] = output.strip().splitlines()
    assert f"The resume channel ({channels / 'resume'}) holds no complete checkpoint" in line


def test_the_script_exits_non_zero_with_the_sentence_only(channels):
    """As SageMaker runs it: a process, its exit status and its log."""
    result = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--train-dir", str(channels / "empty")],
        capture_output=True,
        text=True,
        cwd=SCRIPTS,
    )
    assert result.returncode == 2
    assert result.stdout.strip().endswith("holds no *.bin token shards.")
    assert "Traceback" not in result.stdout + result.stderr


def test_toolkit_style_flags_and_sagemaker_environment_are_read(channels, monkeypatch):
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(channels / "train"))
    monkeypatch.setenv("SM_MODEL_DIR", str(channels / "model"))
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", '{"hybrid_shard_degree": 2}')
    args = train.parse_args(
        ["--max_steps", "7", "--async_checkpoint", "True", "--sagemaker_program", "train.py"]
    )
    assert (args.max_steps, args.async_checkpoint) == (7, True)
    assert (args.train_dir, args.model_dir) == (str(channels / "train"), str(channels / "model"))
    assert args.mp_parameters == {"hybrid_shard_degree": 2}
    assert args.checkpoint_dir == "/opt/ml/checkpoints"
    # A dict hyperparameter reaches the script flattened by the toolkit (sagemaker_training.mapping).
    args = train.parse_args(["--mp_parameters", "hybrid_shard_degree=8,tensor_parallel_degree=1"])
    assert args.mp_parameters == {"hybrid_shard_degree": 8, "tensor_parallel_degree": 1}


@pytest.mark.parametrize(
    ("requested", "smp", "smddp", "cuda", "strategy", "backend", "warns"),
    [
        ("torchrun", False, False, False, "torchrun", "gloo", False),
        ("torchrun", False, False, True, "torchrun", "cpu:gloo,cuda:nccl", False),
        ("smp", True, True, True, "smp", "cpu:gloo,cuda:nccl", False),
        ("smp", False, False, True, "torchrun", "cpu:gloo,cuda:nccl", True),
        ("smp", False, False, False, "torchrun", "gloo", True),
        # smp: torch.sagemaker serves this machine's device (the CPU stand-in of tests/training/test_smp.py)
        ("smp", True, False, False, "smp", "gloo", False),
        # smddp serves one device type: the group names it, so object collectives use it (torch 2.5.1
        # _get_pg_default_device; a backend registered without `devices` would make them default to the CPU)
        ("smddp", True, True, True, "smddp", "cuda:smddp", False),
        ("smddp", False, False, True, "torchrun", "cpu:gloo,cuda:nccl", True),
        ("smddp", True, False, False, "torchrun", "gloo", True),
        # smddp: its backend serves this machine's device (the CPU stand-in of tests/training/test_smddp.py)
        ("smddp", False, True, False, "smddp", "cpu:smddp", False),
    ],
)
def test_strategy_selection_falls_back_where_the_sagemaker_libraries_cannot_run(
    requested, smp, smddp, cuda, strategy, backend, warns
):
    chosen, chosen_backend, warning = distributed.select_strategy(requested, smp, smddp, cuda)
    assert (chosen, chosen_backend, warning is not None) == (strategy, backend, warns)


@pytest.mark.parametrize(
    ("num_samples", "dp_size", "micro", "accum"), [(96, 2, 4, 3), (100, 4, 2, 2), (7, 1, 7, 1)]
)
def test_every_sample_is_read_once_per_epoch_across_ranks(num_samples, dp_size, micro, accum):
    orders = [
        data.SampleOrder(
            num_samples, seed=3, dp_rank=rank, dp_size=dp_size, micro_batch_size=micro, grad_accum=accum
        )
        for rank in range(dp_size)
    ]
    steps = orders[0].steps_per_epoch
    for epoch in range(2):
        read = np.concatenate(
            [
                np.concatenate(order.micro_batches(epoch * steps + step))
                for order in orders
                for step in range(steps)
            ]
        )
        global_batch = micro * accum * dp_size
        assert len(read) == len(set(read.tolist())) == num_samples // global_batch * global_batch
    first_epoch = [orders[0].micro_batches(step)[0].tolist() for step in range(steps)]
    second_epoch = [orders[0].micro_batches(steps + step)[0].tolist() for step in range(steps)]
    assert first_epoch != second_epoch or steps * micro == 7  # reshuffled (a 1-batch epoch cannot differ)


def test_the_order_at_a_step_does_not_depend_on_what_was_read_before():
    """A resumed process reads at step N what the uninterrupted one read."""
    uninterrupted = data.SampleOrder(500, seed=1, dp_rank=1, dp_size=2, micro_batch_size=4, grad_accum=2)
    history = [uninterrupted.micro_batches(step) for step in range(200)]
    resumed = data.SampleOrder(500, seed=1, dp_rank=1, dp_size=2, micro_batch_size=4, grad_accum=2)
    for step in (199, 64, 65, 150):
        assert [b.tolist() for b in resumed.micro_batches(step)] == [b.tolist() for b in history[step]]


def test_token_ids_beyond_the_vocabulary_are_reported_with_their_shard(tmp_path):
    np.array([5, 6, 7, 8, 9], dtype="<u2").tofile(tmp_path / "a.bin")
    np.array([5, 600, 7, 8, 9], dtype="<u2").tofile(tmp_path / "b.bin")
    dataset = data.TokenDataset(str(tmp_path), seq_len=4, channel="train")
    # Two ranks scan every other shard each; their results combine into every shard's largest id.
    scans = [dataset.largest_token_ids(rank, 2) for rank in range(2)]
    assert scans[0].tolist() == [9, -1] and scans[1].tolist() == [-1, 600]
    with pytest.raises(
        data.UserError,
        match=f"shard {tmp_path / 'b.bin'} holds token id 600, not below the model's vocabulary size 512",
    ):
        dataset.check_vocabulary(np.maximum(*scans), 512)


def test_samples_do_not_cross_shards(tmp_path):
    np.arange(0, 10, dtype="<u2").tofile(tmp_path / "a.bin")
    np.arange(100, 107, dtype="<u2").tofile(tmp_path / "b.bin")
    dataset = data.TokenDataset(str(tmp_path), seq_len=3, channel="train")
    assert len(dataset) == 3 + 2
    assert dataset.batch(np.arange(5)).tolist() == [
        [0, 1, 2, 3],
        [3, 4, 5, 6],
        [6, 7, 8, 9],
        [100, 101, 102, 103],
        [103, 104, 105, 106],
    ]


def test_metric_definitions_parse_the_lines_rank_0_prints():
    log = "\n".join(
        [
            "2026-01-01 INFO " + format_train_line(10, 100, 2.5, 1.25, 3e-4, 12345.6, 0.4123),
            "2026-01-01 INFO " + format_val_line(10, 2.25),
            "2026-01-01 INFO " + format_train_line(20, 100, 0.000123, 0.5, 3e-4, 9.5, None),
            # A diverging run must show in SageMaker's charts, not vanish from them.
            "2026-01-01 INFO " + format_train_line(30, 100, math.nan, math.inf, 3e-4, 9.5, None),
            "2026-01-01 INFO " + format_val_line(30, -math.inf),
        ]
    )
    metrics = parse_metrics(log)
    assert metrics["train:loss"][:2] == [2.5, 0.0001] and math.isnan(metrics["train:loss"][2])
    assert metrics["train:grad_norm"] == [1.25, 0.5, math.inf]
    assert metrics["validation:loss"] == [2.25, -math.inf]
    assert metrics["train:tokens_per_second"] == [12345.6, 9.5, 9.5]
    assert metrics["train:mfu_percent"] == [41.23]
    # SageMaker compiles each regex on its own; each must hold exactly one capture group.
    assert all(re.compile(d["Regex"]).groups == 1 for d in METRIC_DEFINITIONS)


def test_metrics_module_imports_nothing_but_the_standard_library():
    code = (
        "import sys; import training_scripts.metrics; "
        "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'metrics', 'data') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=SCRIPTS.parent, check=True
    )
    assert result.stdout.strip() == "[]"


def test_prepare_data_writes_train_and_val_shards_train_py_reads(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello world " * 100)
    (corpus / "b.txt").write_text("héllo " * 50)
    subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "prepare_data.py"),
            "--input",
            str(corpus),
            "--output",
            str(tmp_path / "out"),
            "--val-fraction",
            "0.1",
            "--shard-tokens",
            "500",
        ],
        check=True,
    )
    train_tokens = np.concatenate(
        [np.fromfile(f, dtype="<u2") for f in sorted((tmp_path / "out/train").glob("*.bin"))]
    )
    val_tokens = np.concatenate(
        [np.fromfile(f, dtype="<u2") for f in sorted((tmp_path / "out/val").glob("*.bin"))]
    )
    a, b = len(b"hello world " * 100) + 1, len("héllo ".encode() * 50) + 1
    assert len(train_tokens) + len(val_tokens) == a + b
    assert len(val_tokens) == int(a * 0.1) + int(b * 0.1)
    assert bytes(train_tokens[:11].astype(np.uint8)) == b"hello world"
    assert (train_tokens == 256).sum() == 0 and (val_tokens == 256).sum() == 2  # end of each document
    assert len(list((tmp_path / "out/train").glob("*.bin"))) == -(-len(train_tokens) // 500)
    assert len(data.TokenDataset(str(tmp_path / "out/val"), seq_len=8, channel="val")) > 0


@pytest.mark.parametrize(("dp_size", "micro", "accum"), [(1, 2, 4), (4, 1, 2), (8, 1, 1)])
def test_another_number_of_ranks_with_the_same_global_batch_reads_the_same_samples(dp_size, micro, accum):
    """2 ranks x 2 x 2 resumed on other ranks with accumulation adjusted: every step, the same batch."""
    before = [data.SampleOrder(300, 5, rank, 2, 2, 2) for rank in range(2)]
    after = [
        data.SampleOrder(
            300, 5, rank, dp_size, micro, accum, start_step=40, start_position=before[0].position(40)
        )
        for rank in range(dp_size)
    ]
    for step in range(40, 150):
        read_before = np.concatenate([np.concatenate(order.micro_batches(step)) for order in before])
        read_after = np.concatenate([np.concatenate(order.micro_batches(step)) for order in after])
        assert read_after.tolist() == read_before.tolist()


def test_a_changed_global_batch_continues_at_the_checkpoints_position():
    old = data.SampleOrder(100, 5, 0, 1, 8, 1)  # 12 steps per epoch, 4 samples dropped
    new = data.SampleOrder(100, 5, 0, 1, 6, 1, start_step=5, start_position=old.position(5))
    first_epoch = [
        *(old.global_samples(step) for step in range(5)),
        *(new.global_samples(s) for s in range(5, 15)),
    ]
    read = np.concatenate(first_epoch).tolist()
    assert read == old.permutation(0)[: len(read)].tolist()  # no sample twice, none skipped
    assert new.position(15) == (1, 0)  # 40 + 60 = 100 samples: the epoch is read to its end
    assert new.global_samples(15).tolist() == old.permutation(1)[:6].tolist()


@pytest.mark.parametrize("dp_size", [1, 2, 3, 5])
def test_validation_covers_the_same_samples_whatever_the_number_of_ranks(dp_size):
    counted = []
    batch_counts = set()
    for rank in range(dp_size):
        batches, real = data.validation_batches(50, rank, dp_size, micro_batch_size=4, max_batches=3)
        counted += np.concatenate(batches)[:real].tolist()
        batch_counts.add(len(batches))
    assert sorted(counted) == list(range(12))
    assert len(batch_counts) == 1  # every rank runs as many forward passes (sharded models need it)
