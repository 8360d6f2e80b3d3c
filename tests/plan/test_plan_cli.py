"""`trainstack plan` as a user runs it, and the planner's choices on the shipped profiles."""

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_CONFIG, NO_ENV
from trainstack.cli import main
from trainstack.config_loading import load_settings
from trainstack.instances import instance_type
from trainstack.planning.plans import plan, recommend
from trainstack.planning.setups import (
    TRAIN_DEFAULTS,
    fit_problems,
    instance_count_problem,
    preset_shape,
    setup_for_profile,
)
from trainstack.prices import offline_training_prices
from trainstack.profiles import Profile

SCRIPTS = Path(__file__).resolve().parents[2] / "training_scripts"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_profile_plan_prints_each_preference_with_memory_fit_time_and_cost(capsys):
    code, out, _ = run(capsys, "--profile", "llama-7b-smp", "--config", str(DEFAULT_CONFIG))
    assert code == 0
    assert "ml.p5.48xlarge x2 (16 x H100):" in out and "ml.p4de.24xlarge x2 (16 x A100):" in out
    lines = [line for line in out.splitlines() if "GiB per GPU" in line]
    # GPU memory as nvidia-smi reports it: H100 81559 MiB, A100 80GB 81920 MiB.
    assert len(lines) == 2
    assert "of 79.6 GiB per GPU, fits;" in lines[0] and "of 80.0 GiB per GPU, fits;" in lines[1]
    assert all("tokens/s" in line and " h, $" in line for line in lines)
    # SMP's FSDP1 gathers bf16 by AWS's MixedPrecision: no autocast copies of the weights
    assert "per GPU (GiB): weights 3.1, gradients 3.1, optimizer 6.3, bf16 weight copies 0.0" in out


def test_json_parses_and_adds_up(capsys):
    code, out, _ = run(capsys, "--profile", "llama-7b-smp", "--json", "--tokens", "1B")
    assert code == 0
    document = json.loads(out)
    first, second = document["plans"]
    assert (first["instance_type"], second["instance_type"]) == ("ml.p5.48xlarge", "ml.p4de.24xlarge")
    parts = first["memory_per_gpu_gib"]
    assert sum(value for name, value in parts.items() if name != "total") == pytest.approx(
        parts["total"], abs=0.01
    )
    assert first["fits"] and first["tokens"] == 1e9
    # H100 does more tokens per second than A100, so the same budget takes less time.
    assert first["hours"] < second["hours"]
    hourly = document["assumptions"]["prices"]["usd_per_instance_hour"]["ml.p5.48xlarge"]["usd"]
    assert hourly == offline_training_prices("us-east-1").hourly_usd(
        "ml.p5.48xlarge"
    )  # no credentials: offline
    assert first["cost_usd"] == pytest.approx(first["hours"] * hourly * 2, rel=1e-3)


def test_a_model_too_big_for_the_type_gets_the_smallest_change_that_fits(capsys):
    code, out, _ = run(
        capsys, "--model-preset", "1b", "--instance-type", "ml.p4d.24xlarge", "--parallelism", "ddp"
    )
    assert code == 1
    assert "does NOT fit" in out
    assert "smallest change that fits: shard: hyperparameter parallelism fsdp" in out


def test_recommend_names_smp_sharding_that_fits_and_never_tensor_parallelism(capsys):
    code, out, _ = run(
        capsys,
        "--model-preset",
        "7b",
        "--instance-type",
        "ml.p4d.24xlarge",
        "--instance-count",
        "2",
        "--recommend",
    )
    assert code == 1 and "does NOT fit" in out  # FSDP2 with micro-batch 8 at seq 1024 does not fit 40 GiB
    [line] = [line for line in out.splitlines() if "recommended:" in line]
    assert line.strip().startswith("recommended: smp.hybrid_shard_degree ") and ", fits;" in line
    assert "tensor_parallel" not in out  # train.py refuses it (trainstack/profiles.py)


def test_recommendation_is_the_fastest_layout_that_fits():
    spec = instance_type("ml.p5.48xlarge")
    setup = setup_for_profile(
        next(p for p in load_settings(DEFAULT_CONFIG, environ=NO_ENV).profiles if p.name == "llama-7b-smp")
    )
    shipped = plan(setup, spec, 2, None)
    best = recommend(setup, spec, 2, None)
    assert shipped.fits and best.fits
    assert best.throughput.tokens_per_second >= shipped.throughput.tokens_per_second
    # On the A100 40 GB type too (25.7 GiB): autocast's bf16 copies of the weights (12.3 GiB) no longer
    # count under SMP's bf16 MixedPrecision.
    smaller = instance_type("ml.p4d.24xlarge")
    assert plan(setup, smaller, 2, None).fits and recommend(setup, smaller, 2, None).fits


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--instance-type", "ml.p9.huge"], "trainstack plan: --instance-type must be one of ml.c5.4xlarge,"),
        (
            ["--model-preset", "70x"],
            "trainstack plan: --model-preset must be one of tiny, 125m, 1b, 7b, 13b, 70b.",
        ),
        (["--model-preset", "1b"], "trainstack plan: --instance-type is required without --profile"),
        (
            ["--profile", "nope"],
            "trainstack plan: --profile must be one of the config's profiles: llama-7b-smp,",
        ),
        (
            ["--profile", "nccl-test"],
            "trainstack plan: --profile: profile nccl-test runs nccl_test.sh, not train.py.",
        ),
        (
            ["--instance-type", "ml.p5.48xlarge", "--tokens", "lots"],
            "trainstack plan: --tokens must be a number of tokens of at least 1, such as 2e9 or 2B",
        ),
        (
            ["--instance-type", "ml.p5.48xlarge", "--seq-len", "0"],
            "trainstack plan: --seq-len must be a whole number of at least 1, got '0'.",
        ),
        (
            ["--instance-type", "ml.p5.48xlarge", "--hybrid-shard-degree", "2"],
            "trainstack plan: --hybrid-shard-degree applies only to strategy smp.",
        ),
        (["--instance-type", "ml.m5.xlarge"], "trainstack plan: --instance-type: plan a GPU type;"),
    ],
)
def test_bad_input_is_one_sentence_naming_the_flag(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1 and err.rstrip().endswith(".")


def test_init_from_reads_the_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({**preset_shape("1b"), "tie_word_embeddings": True}))
    code, out, _ = run(capsys, "--init-from", str(tmp_path), "--instance-type", "ml.p5.48xlarge", "--json")
    assert code == 0 and json.loads(out)["setup"]["model"] == str(tmp_path)


def test_every_shipped_training_profile_fits_its_preferences():
    for profile in load_settings(DEFAULT_CONFIG, environ=NO_ENV).profiles:
        assert list(fit_problems(profile)) == []


def test_defaults_are_train_py_defaults():
    sys.path.insert(0, str(SCRIPTS))
    import flags  # noqa: PLC0415  (train.py's parser: torch is installed in the test environment)

    defaults = vars(flags.build_parser().parse_args([]))
    assert {name: defaults[name] for name in TRAIN_DEFAULTS} == TRAIN_DEFAULTS


def test_an_instance_count_override_that_cannot_fit_is_refused():
    """The pipeline's instanceCount rule comes from instance_count_problem: fewer instances
    shard FSDP over fewer GPUs, so the same 13b profile fits on 2 p4d but not on 1."""
    profile = Profile.model_validate(
        {
            "name": "llama-13b-fsdp",
            "strategy": "torchrun",
            "instance_preferences": [{"instance_type": "ml.p4d.24xlarge", "instance_count": 2}],
            "hyperparameters": {
                "model_preset": "13b",
                "seq_len": "4096",
                "micro_batch_size": "2",
                "activation_checkpointing": "true",
            },
        }
    )
    assert instance_count_problem(profile, 2) is None
    assert instance_count_problem(profile, 1).startswith(
        "profile llama-13b-fsdp cannot fit model 13b on instance_preferences.0 (ml.p4d.24xlarge): it needs "
    )


def test_fsdp2_and_smps_bf16_policies_fit_70b_where_autocast_copies_of_the_whole_model_do_not(capsys):
    """FSDP2's and SMP's FSDP1 bf16 policies (SMP: AWS's MixedPrecision(bf16, bf16, fp32)) keep no
    whole-model bf16 copy; DDP under autocast keeps 128 GiB of it, whatever the number of GPUs."""
    common = ("--model-preset", "70b", "--instance-type", "ml.p5.48xlarge", "--instance-count", "8")
    common += ("--seq-len", "4096", "--micro-batch-size", "1", "--activation-checkpointing", "true", "--json")
    code, out, _ = run(capsys, *common)
    fsdp = json.loads(out)["plans"][0]
    code_smp, out, _ = run(capsys, *common, "--strategy", "smp")
    smp = json.loads(out)["plans"][0]
    _, out, _ = run(capsys, *common, "--parallelism", "ddp")
    ddp = json.loads(out)["plans"][0]
    assert (code, fsdp["fits"], fsdp["layout"]["bf16_gather"]) == (0, True, True)
    assert (code_smp, smp["fits"], smp["layout"]["bf16_gather"], smp["layout"]["bf16_reduce"]) == (
        0,
        True,
        True,
        True,
    )
    assert (
        fsdp["memory_per_gpu_gib"]["bf16_weight_copies"]
        == smp["memory_per_gpu_gib"]["bf16_weight_copies"]
        == 0
    )
    assert ddp["memory_per_gpu_gib"]["bf16_weight_copies"] == pytest.approx(128, abs=1)
    # the same bf16 gathered layers; the gradient being reduced: bf16 + its fp32 copy (FSDP2), bf16 (SMP)
    assert smp["memory_per_gpu_gib"]["working_buffers"] < fsdp["memory_per_gpu_gib"]["working_buffers"]


def test_help_names_every_aws_read_plan_makes(capsys):
    """Issue 49: `trainstack --help` said plan makes no AWS calls; `plan --profile` reads Service Quotas."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "no AWS calls" not in text
    for read in ("pricing:GetProducts", "service-quotas:ListServiceQuotas", "sagemaker:DescribeTrainingPlan"):
        assert read in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "no AWS calls" not in capsys.readouterr().out
