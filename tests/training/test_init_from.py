"""--init-from a saved model: rank 0 alone reads its files and broadcasts them, chunk by chunk, to the other
ranks."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing
from model import LOAD_CHUNK_BYTES, build_model, initialize, load_pretrained, model_config
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoConfig, AutoModelForCausalLM

from tests.training.harness import torchrun_command, train
from training_scripts.metrics import parse_metrics

MiB = 1 << 20


def test_a_run_from_another_runs_model_starts_with_its_loss_on_every_rank(dataset, tmp_path, reference_run):
    # The logged loss is the mean over both ranks: a rank without the weights would raise it to ~6.
    run = train(
        dataset, tmp_path, "--init-from", str(reference_run.model_dir),
        "--max-steps", "1", "--log-interval", "1", "--learning-rate", "1e-9",
    )  # fmt: skip
    assert run.returncode == 0, run.output
    (first,) = parse_metrics(run.output)["train:loss"]
    reference = parse_metrics(reference_run.output)["train:loss"]
    assert first < 1.5 * reference[-1] < 0.5 * reference[0], (first, reference)


def test_weights_that_do_not_cover_the_model_are_named_in_one_sentence(dataset, tmp_path, reference_run):
    start = tmp_path / "start"
    shutil.copytree(reference_run.model_dir, start)
    weights = load_file(start / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, start / "model.safetensors", metadata={"format": "pt"})

    run = train(dataset, tmp_path / "out", "--init-from", str(start))
    assert run.returncode != 0
    message = (
        f"--init-from {start} has no weights for 1 of the model's tensors (lm_head.weight): its files must "
        "be those transformers' save_pretrained writes for the class in its config.json."
    )
    assert run.output.count(message) == 1, run.output  # rank 0 reports; every rank stops
    assert run.output.count("Traceback") == 1, run.output  # torchrun's own report; none of a rank


FILE_FORMATS = ("safetensors", "bin")


def load_one_tensor_per_chunk(rank: int, parallelism: str, saved_dirs: list[str], store: str) -> None:
    """One of two ranks: load each of `saved_dirs` into a freshly initialized model, a chunk per tensor, and
    compare (one process group for every file format: each spawn costs two interpreters importing torch)."""
    import model

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    model.LOAD_CHUNK_BYTES = 1
    for saved in saved_dirs:
        hf_model = build_model(AutoConfig.from_pretrained(saved))
        if parallelism == "ddp":
            initialize(hf_model, hf_model, torch.device("cpu"), seed=0, allocate=True)
            wrapped = DistributedDataParallel(hf_model)
        else:
            from torch.distributed.fsdp import fully_shard  # torch 2.5.1 (FSDP2 there needs CUDA) lacks it

            for layer in hf_model.model.layers:
                fully_shard(layer)
            wrapped = fully_shard(hf_model)
            initialize(wrapped, hf_model, torch.device("cpu"), seed=0, allocate=True)
        load_pretrained(wrapped, hf_model, saved, torch.device("cpu"))
        loaded = get_model_state_dict(wrapped, options=StateDictOptions(full_state_dict=True))
        expected = AutoModelForCausalLM.from_pretrained(saved).state_dict()  # transformers' own loader
        expected["lm_head.weight"] = expected["model.embed_tokens.weight"]  # tied: saved once
        for name, tensor in expected.items():
            assert loaded[name].dtype == torch.float32, (saved, name)  # fp32 master weights from bf16 files
            assert torch.equal(loaded[name], tensor.float()), (saved, name)
        assert loaded.keys() == expected.keys(), saved
    dist.barrier()  # before destroying the gloo group: training_scripts/distributed.py's settle() says why
    dist.destroy_process_group()


@pytest.mark.parametrize(
    "parallelism",
    [
        pytest.param("fsdp", marks=pytest.mark.newer_stack),
        pytest.param("ddp", marks=[pytest.mark.newer_stack, pytest.mark.image_stack]),
    ],
)
def test_every_tensor_arrives_on_every_rank_in_chunks_of_one_tensor(tmp_path, parallelism):
    """A tied bf16 model loaded a tensor at a time, from safetensors and from a .bin: each chunk leaves the
    model's other tensors as they are, on both stacks (torch 2.5.1 refused a partial dict for DDP's
    wrapper)."""
    config = model_config("tiny", None, None, 32)
    config.tie_word_embeddings = True
    saved_dirs = []
    for file_format in FILE_FORMATS:
        saved = tmp_path / file_format
        AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(saved)
        weights = load_file(saved / "model.safetensors")
        assert "lm_head.weight" not in weights
        if file_format == "bin":  # as save_pretrained(safe_serialization=False) wrote (transformers 5 cannot)
            torch.save(weights, saved / "pytorch_model.bin")
            (saved / "model.safetensors").unlink()
        saved_dirs.append(str(saved))
    torch.multiprocessing.spawn(
        load_one_tensor_per_chunk, args=(parallelism, saved_dirs, str(tmp_path / "store")), nprocs=2
    )


def dry_run_reports(tmp_path, *flags: str, env: dict[str, str] | None = None) -> list[dict[str, int]]:
    result = subprocess.run(
        torchrun_command("--dry-run", "--parallelism", "fsdp", "--model-dir", str(tmp_path / "dry"), *flags),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = re.findall(r"dry_run rank=\d+ .*?peak_rss_bytes=\d+", result.stdout)  # ranks may share a line
    reports = [{key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)} for line in lines]
    reports.sort(key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == [0, 1], result.stdout
    return reports


# FSDP2 in torch 2.5.1 needs CUDA. Under DDP no bound would fail without chunks: its from-scratch peak
# (125m on 2.5.1: 1.64 GB per rank, two fp32 models) is that of a whole-file load too.
@pytest.mark.newer_stack
def test_loading_adds_at_most_one_chunk_to_any_ranks_peak(tmp_path):
    """Side by side with a dry run that builds the same model from scratch: rank 0 reads the files, and
    every rank receives them, one chunk at a time (125m saved in fp32: 0.54 GB, more than two chunks; the
    1b preset's figures are in docs/training.md)."""
    config = model_config("125m", None, None, 2048)
    saved = tmp_path / "saved"
    AutoModelForCausalLM.from_config(config).save_pretrained(saved)
    file_bytes = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    slack = 16 * MiB
    assert file_bytes > LOAD_CHUNK_BYTES + slack  # so holding the whole files exceeds the bound below

    scratch = dry_run_reports(tmp_path, "--model-preset", "125m")
    loaded = dry_run_reports(tmp_path, "--init-from", str(saved))
    peaks = []
    for before, after in zip(scratch, loaded, strict=True):
        assert after["parameter_bytes"] == before["parameter_bytes"]  # fp32 master weights
        peaks.append((before["peak_rss_bytes"], after["peak_rss_bytes"]))
    for before, after in peaks:
        assert after <= before + LOAD_CHUNK_BYTES + slack, (peaks, file_bytes)
