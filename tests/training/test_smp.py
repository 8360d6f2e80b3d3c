"""The SMP v2 path on CPU: train.py under torchrun with the stand-in `torch.sagemaker` (tests/training/
stand_ins/smp: records the order of SMP's calls and enforces what AWS documents), on the image's torch
2.5.1 and transformers 4.44.2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from tests.training.harness import REPO_ROOT, TRAIN_FLAGS, run_dirs, torchrun_command
from tests.training.test_init_from import MiB, dry_run_reports
from training_scripts.metrics import parse_metrics

SMP_STAND_IN = REPO_ROOT / "tests" / "training" / "stand_ins" / "smp"
FULL_SHARD = '{"hybrid_shard_degree": 0, "tensor_parallel_degree": 1}'
STEPS = ["--max-steps", "4", "--log-interval", "1", "--val-interval", "4", "--checkpoint-interval", "4"]


def with_smp_stand_in(calls: Path) -> dict[str, str]:
    calls.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(SMP_STAND_IN), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "TORCH_SAGEMAKER_STAND_IN_LOG": str(calls)}


def run_train(dataset: Path, out: Path, *flags: str) -> tuple[subprocess.CompletedProcess, list[list[dict]]]:
    """train.py on 2 ranks with the stand-in importable; the calls each rank made, in order."""
    result = subprocess.run(
        torchrun_command(*TRAIN_FLAGS, *run_dirs(dataset, out), *STEPS, *flags),
        capture_output=True,
        text=True,
        timeout=600,
        env=with_smp_stand_in(out / "calls"),
    )
    calls = [
        [json.loads(line) for line in (out / "calls" / f"calls_rank{rank}.jsonl").read_text().splitlines()]
        if (out / "calls" / f"calls_rank{rank}.jsonl").exists()
        else []
        for rank in (0, 1)
    ]
    return result, calls


@pytest.fixture(scope="module")
def smp_and_ddp_runs(dataset, tmp_path_factory):
    """The same tiny training under SMP (FSDP1 on the stand-in) and under DDP, side by side."""
    smp = run_train(
        dataset, tmp_path_factory.mktemp("smp"), "--strategy", "smp", "--mp-parameters", FULL_SHARD
    )
    ddp = run_train(dataset, tmp_path_factory.mktemp("ddp"), "--parallelism", "ddp")
    return smp, ddp


def test_smp_calls_init_then_the_delayed_initializer_then_fsdp_then_the_optimizer_on_every_rank(
    smp_and_ddp_runs,
):
    (result, calls), _ = smp_and_ddp_runs
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "on 2 ranks (smp, " in output, output  # no fallback
    for rank_calls in calls:
        # AWS's order (train_lib.py:426-639), without transform (SMP's own implementation is not used)
        assert [call["call"] for call in rank_calls] == [
            "init",
            "DelayedParamIniter",
            "fsdp_wrap",
            "optimizer",
        ]
        init, initer, wrap, optimizer = rank_calls
        assert init["config"] == json.loads(FULL_SHARD)
        assert initer["custom_init"] is True  # our per-module initializer: DDP's initial weights
        assert wrap["use_orig_params"] is True and wrap["param_init_fn"] is True
        assert wrap["sharding_strategy"] == "ShardingStrategy.FULL_SHARD"
        assert wrap["mixed_precision"] is None  # CPU: fp32 throughout (the GPU policy: test_precision.py)
        assert optimizer["type"] == "AdamW"
        decay, no_decay = optimizer["groups"]
        assert (decay["betas"], decay["eps"], decay["lr"] > 0) == ([0.9, 0.95], 1e-8, True)
        assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)


def test_smps_weight_decay_group_is_ddps_although_fsdp1_flattens_every_parameter(smp_and_ddp_runs, tmp_path):
    """`p.dim() >= 2` saw no matrix under FSDP1 (every parameter a 1-D view of its shard): no decay at all.
    The groups by module type and name (AWS's rule) hold the same tensors as DDP's groups of the same
    model, and, summed over the two ranks' shards, the same elements."""
    (smp, smp_calls), _ = smp_and_ddp_runs
    assert smp.returncode == 0, smp.stdout + smp.stderr
    smp_groups = [rank_calls[-1]["groups"] for rank_calls in smp_calls]
    ddp_groups = _ddp_groups(tmp_path)
    assert ddp_groups[1][0] == 2 * _tiny_shape()["num_hidden_layers"] + 1  # RMSNorm weights; no biases
    for index in (0, 1):
        tensors, elements = ddp_groups[index]
        assert smp_groups[0][index]["tensors"] == smp_groups[1][index]["tensors"] == tensors
        assert sum(groups[index]["local_elements"] for groups in smp_groups) == elements > 0


def _ddp_groups(tmp_path: Path) -> list[tuple[int, int]]:
    """(tensors, elements) of each AdamW group train.py builds for the tiny preset under DDP."""
    sys.path.insert(0, str(REPO_ROOT / "training_scripts"))
    import torch.distributed as dist
    from model import build_model, initialize, model_config
    from optimizer import no_decay_names, parameter_groups
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = build_model(model_config("tiny", None, None, 32))
        no_decay = no_decay_names(model)
        initialize(model, model, torch.device("cpu"), seed=0, allocate=True)
        groups = parameter_groups(DistributedDataParallel(model), no_decay, 0.1)
        return [(len(group["params"]), sum(p.numel() for p in group["params"])) for group in groups]
    finally:
        dist.destroy_process_group()


def test_smp_starts_from_ddps_weights(smp_and_ddp_runs):
    """Same seed, same data: the first step's loss (before any update) is DDP's."""
    (smp, _), (ddp, _) = smp_and_ddp_runs
    smp_loss, ddp_loss = parse_metrics(smp.stdout)["train:loss"], parse_metrics(ddp.stdout)["train:loss"]
    assert smp_loss[0] == pytest.approx(ddp_loss[0], abs=2e-4), (smp_loss, ddp_loss)
    assert smp_loss[-1] < smp_loss[0]


def test_smps_exported_model_is_a_transformers_model(smp_and_ddp_runs):
    (smp, _), _ = smp_and_ddp_runs
    model_dir = Path(smp.args[smp.args.index("--model-dir") + 1])
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert type(model).__name__ == "LlamaForCausalLM"


def _tiny_shape() -> dict:
    sys.path.insert(0, str(REPO_ROOT / "training_scripts"))
    from model_shapes import PRESETS

    return dict(PRESETS["tiny"])


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [
        (
            ["--smp-implementation", "true"],
            "Argument --smp-implementation: must be false: tsm.transform swaps transformers' modules",
        ),
        (
            ["--mp-parameters", '{"sm_activation_offloading": true}'],
            "Argument --mp-parameters: sm_activation_offloading must be false",
        ),
    ],
    ids=["smp implementation", "activation offloading"],
)
def test_what_train_py_cannot_do_under_smp_is_refused_in_one_sentence(dataset, tmp_path, flags, sentence):
    result, calls = run_train(dataset, tmp_path, "--strategy", "smp", *flags)
    assert result.returncode != 0
    assert sentence in result.stdout, result.stdout
    assert calls == [[], []]  # refused before tsm.init


STAND_IN_SCRIPT = """
import torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel
from transformers import LlamaConfig, LlamaForCausalLM
dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
import torch.sagemaker as tsm
model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, vocab_size=32))
try:
{body}
except (RuntimeError, ValueError) as error:
    print("REFUSED", error, flush=True)
dist.destroy_process_group()
"""


STAND_IN_CASES = {
    "transform before init": ("model = tsm.transform(model)", "before torch.sagemaker.init()"),
    "transform after FSDP": (
        "tsm.init({})\nwrapped = FullyShardedDataParallel(model, device_id=torch.device('cpu'))\n"
        "tsm.transform(model)",
        "transform after fsdp_wrap",
    ),
    "optimizer before FSDP": (
        "tsm.init({})\ntorch.optim.AdamW(model.parameters())",
        "optimizer created before FSDP wrapping",
    ),
    "unknown key": ('tsm.init({"pipeline_parallel_degree": 2})', "unknown SMP v2 config keys"),
    "hybrid > world": ('tsm.init({"hybrid_shard_degree": 8})', "hybrid_shard_degree 8 not in 0..1"),
}

# Runs each case's script in a process of its own, forked from one interpreter that imported torch and
# transformers once (seconds of CPU per interpreter): the stand-in, imported by the script, is fresh in each.
FORKING_RUNNER = """
import json, os, sys, traceback
import torch, torch.distributed, torch.distributed.fsdp, transformers
for case in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        os.makedirs(case["calls"])
        os.environ["TORCH_SAGEMAKER_STAND_IN_LOG"] = case["calls"]
        with open(case["output"], "w") as stdout, open(case["output"] + ".stderr", "w") as stderr:
            os.dup2(stdout.fileno(), 1)
            os.dup2(stderr.fileno(), 2)
            code = 0
            try:
                exec(case["script"], {"__name__": "__main__"})
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    with open(case["output"] + ".returncode", "w") as returncode:
        returncode.write(str(os.waitstatus_to_exitcode(status)))
"""


@pytest.fixture(scope="module")
def stand_in_outputs(tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """Each case's exit code, stdout and stderr."""
    root = tmp_path_factory.mktemp("stand-in")
    cases = [
        {
            "script": STAND_IN_SCRIPT.format(
                store=root / f"store-{index}", body=textwrap.indent(body, "    ")
            ),
            "output": str(root / f"output-{index}"),
            "calls": str(root / f"calls-{index}"),
        }
        for index, (body, _) in enumerate(STAND_IN_CASES.values())
    ]
    subprocess.run(
        [sys.executable, "-c", FORKING_RUNNER, json.dumps(cases)],
        check=True,
        timeout=300,
        env=with_smp_stand_in(root / "calls"),
    )
    return {
        name: tuple(
            transform(Path(case["output"] + suffix).read_text())
            for transform, suffix in ((int, ".returncode"), (str, ""), (str, ".stderr"))
        )
        for name, case in zip(STAND_IN_CASES, cases, strict=True)
    }


@pytest.mark.parametrize("case", STAND_IN_CASES)
def test_the_stand_in_refuses_what_aws_documents_smp_does_not_allow(stand_in_outputs, case):
    returncode, stdout, stderr = stand_in_outputs[case]
    _, rule = STAND_IN_CASES[case]
    assert returncode == 0, stderr
    assert "REFUSED" in stdout and rule in stdout, stdout


def test_smp_init_from_adds_at_most_one_fsdp_unit_to_any_ranks_peak(tmp_path):
    """Side by side with a dry run that builds the same model from scratch on the SMP path (FSDP1 on the
    stand-in): one FSDP unit (a decoder layer) at a time arrives, so a rank's peak grows by at most two
    layers (gathered, received), where set_model_state_dict (torch 2.5.1) allocated every full tensor."""
    config = LlamaConfig(
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=24,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=512,
        tie_word_embeddings=False,
        architectures=["LlamaForCausalLM"],
    )
    scratch, saved = tmp_path / "scratch", tmp_path / "saved"
    config.save_pretrained(scratch)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(saved)
    model_bytes = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    layer = AutoModelForCausalLM.from_config(config).model.layers[0]
    layer_bytes = sum(p.numel() * 4 for p in layer.parameters())
    slack = 16 * MiB  # collective and Python buffers
    bound = 2 * layer_bytes + slack
    assert model_bytes > 2 * bound  # so holding the whole model's tensors fails the bound below

    # glibc raises its mmap threshold as large blocks are freed, then keeps later ones in the heap after
    # free: RSS would count freed gathers (33-126 MB measured, varying with load). A fixed threshold makes
    # every large tensor its own mapping, returned when freed, so the peak counts live tensors.
    env = {**with_smp_stand_in(tmp_path / "calls"), "MALLOC_MMAP_THRESHOLD_": str(1 * MiB)}
    smp = ["--strategy", "smp", "--mp-parameters", FULL_SHARD, "--seq-len", "32"]
    before = dry_run_reports(tmp_path, *smp, "--init-from", str(scratch), env=env)
    after = dry_run_reports(tmp_path, *smp, "--init-from", str(saved), env=env)
    growth = [a["peak_rss_bytes"] - b["peak_rss_bytes"] for a, b in zip(after, before, strict=True)]
    assert all(g <= bound for g in growth), (growth, bound, model_bytes)


def test_an_smp_run_resumed_from_its_checkpoint_logs_the_uninterrupted_losses(dataset, tmp_path):
    """FSDP1's sharded state (DCP) saves and loads on the stand-in: the second run resumes at step 2 and
    logs steps 3-4 as the first one did."""
    flags = ["--strategy", "smp", "--mp-parameters", FULL_SHARD, "--checkpoint-interval", "2"]
    first, _ = run_train(dataset, tmp_path, *flags)
    assert first.returncode == 0, first.stdout + first.stderr
    second, _ = run_train(dataset, tmp_path, *flags)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Resumed from" in second.stdout and "(step 2)" in second.stdout, second.stdout
    assert parse_metrics(second.stdout)["train:loss"] == parse_metrics(first.stdout)["train:loss"][2:]


# One rank on the SMP path (the stand-in's tsm.init, smp.wrap_smp's FSDP1 with delayed initialization),
# a Llama with tied embeddings (Llama-3.2-1B/3B-style) loaded from what save_pretrained wrote.
TIED_LOAD = """
import json, sys
from pathlib import Path
import torch, torch.distributed as dist, torch.sagemaker as tsm
from torch.distributed.fsdp import FullyShardedDataParallel
sys.path.insert(0, {scripts!r})
from model import build_model, load_pretrained, model_config
from safetensors.torch import load_file
from smp import wrap_smp

dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
tsm.init({{}})
saved = sys.argv[1]
hf_model = build_model(model_config("tiny", saved, None, 32))
model = wrap_smp(hf_model, torch.device("cpu"), {{}}, seed=0)
try:
    load_pretrained(model, hf_model, saved, torch.device("cpu"))
except KeyError as error:
    print(json.dumps({{"error": "KeyError " + str(error)}}))
    sys.exit(0)
stored = load_file(Path(saved) / "model.safetensors")["model.embed_tokens.weight"]
with FullyShardedDataParallel.summon_full_params(model):
    head, embedding = hf_model.lm_head.weight, hf_model.model.embed_tokens.weight
    print(json.dumps({{"tied": head is embedding, "loaded": bool(torch.equal(head, stored))}}))
dist.destroy_process_group()
"""


HASH_SEEDS = (0, 1, 8)


def test_init_from_a_tied_model_under_smp_loads_it_tied_whatever_the_hash_seed(tmp_path):
    """save_pretrained writes the tied weight once (model.embed_tokens.weight). The stored name of a model
    tensor used to come from a set's order, so about half of PYTHONHASHSEED values asked the file for
    lm_head.weight (KeyError on rank 0); and FSDP1's per-module to_empty left lm_head and embed_tokens two
    tensors, so SMP trained two copies. Three seeds side by side, one rank each: with this model's names,
    seeds 0 and 8 picked lm_head.weight, seed 1 the stored name."""
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=512, tie_word_embeddings=True, architectures=["LlamaForCausalLM"],
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "saved")
    script = TIED_LOAD.format(scripts=str(REPO_ROOT / "training_scripts"))
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "saved"), str(tmp_path / f"store{seed}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**with_smp_stand_in(tmp_path / f"calls{seed}"), "PYTHONHASHSEED": str(seed)},
        )
        for seed in HASH_SEEDS
    ]
    results = {}
    for seed, run in zip(HASH_SEEDS, runs, strict=True):
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        results[seed] = json.loads(out.strip().splitlines()[-1])
    assert results == {seed: {"tied": True, "loaded": True} for seed in HASH_SEEDS}, results


def test_a_tie_that_wrapping_lost_stops_the_run_before_training():
    """The check after FSDP1 wrapping fails where two names of one tied parameter hold two tensors."""
    from smp import check_ties

    model = torch.nn.Module()
    model.embed, model.head = torch.nn.Embedding(4, 2), torch.nn.Linear(2, 4, bias=False)
    with pytest.raises(RuntimeError, match="embed.weight and head.weight are one tied parameter"):
        check_ties([["embed.weight", "head.weight"]], model)
    model.head.weight = model.embed.weight
    check_ties([["embed.weight", "head.weight"]], model)
