#!/usr/bin/env bash
# The GPU probe: every figure a ratio of two figures measured side by side on this machine, or an absolute
# that says what it is.
#
#   benchmarks/gpu_probe.sh [--dry-run]        (PYTHON=path/to/python to pick the interpreter)
#
# (a) tokens/s and MFU of train.py (1b preset, FSDP2) against a bare loop of the same model;
# (b) the bare loop under FSDP1 as the SMP path wraps it (smp.fsdp1_wrap: MixedPrecision bf16/bf16/fp32,
#     decoder layers as units, delayed initialization; without torch.sagemaker, not on PyPI) against (a)'s;
# (c) train.py's DCP async save (its blocking part, and until written) against a raw write of the same
#     bytes to the same disk (the DCP copy is deleted first: the disk holds one copy at a time);
# (d) --init-from peak GPU memory (FSDP2's chunked set_model_state_dict; torch.cuda.max_memory_allocated)
#     against the bound load_pretrained claims (this rank's parameters + one LOAD_CHUNK_BYTES chunk);
# (e) all_reduce bandwidth (torch.distributed, NCCL on GPUs) against a local copy of the same bytes;
#     on one GPU no byte crosses a link: "n/a (1 rank)". nccl-tests' all_reduce_perf runs too where it is
#     on PATH and there are 2 or more GPUs.
# Checks first that the interpreter imports numpy, torch (a CUDA build), transformers and safetensors and
# sees a GPU, else says in one sentence what is missing (exit 2); installs nothing, needs no network
# (Hugging Face offline) and no second GPU. Built for one H200 with torch 2.5.1 from PyPI; not yet run on
# a GPU. Time limits keep it under 8 minutes: train.py 150 s, the measurements 270 s (part (c) writes the
# 1b preset's whole training state, about 13 GB, once per method: a disk slower than about 150 MB/s makes
# it run past its limit), nccl-tests 30 s.
# --dry-run: every part on the CPU with tiny sizes (gloo, 2 processes, tiny preset, DDP because torch
# 2.5.1's FSDP2 needs CUDA), same report, well under a minute on an idle machine.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
case "${1:-}" in
    "") dry_run=false ;;
    --dry-run) dry_run=true ;;
    *) echo "usage: benchmarks/gpu_probe.sh [--dry-run]" >&2; exit 2 ;;
esac

if ! command -v "$python" >/dev/null; then
    echo "gpu_probe.sh: there is no Python interpreter $python here; run it with PYTHON= one that has numpy, torch, transformers and safetensors." >&2
    exit 2
fi
"$python" "$root/benchmarks/gpu_probe.py" check $($dry_run || echo --gpu) || exit 2
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # nothing is downloaded: models are built from configs

if $dry_run; then
    nproc=2
    sizes=(--preset tiny --parallelism ddp --seq-len 64 --micro-batch-size 2 --steps 4 --all-reduce-mb 4)
else
    nproc=$("$python" -c "import torch; print(torch.cuda.device_count())")
    sizes=(--preset 1b --parallelism fsdp --seq-len 2048 --micro-batch-size 4 --steps 20 --all-reduce-mb 256)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-probe.XXXXXX")
trap 'rm -rf "$work"' EXIT
probe=("$root/benchmarks/gpu_probe.py" "${sizes[@]}" --work "$work")
torchrun=("$python" -m torch.distributed.run --standalone --nproc_per_node="$nproc")
started=$SECONDS

# Runs a part under a time limit (seconds); on failure prints the end of its log and stops.
part() {
    local limit=$1 log=$2
    shift 2
    if ! timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1; then
        echo "gpu_probe.sh: failed or ran past ${limit} s: $*" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}

# Random token ids below every preset's vocabulary (tiny: 512), plenty for the steps.
mkdir -p "$work/data"
"$python" -c "import numpy, sys; numpy.random.default_rng(0).integers(0, 500, 2_000_000).astype('<u2').tofile(sys.argv[1])" \
    "$work/data/shard.bin"
flags_text=$("$python" "${probe[@]:0:1}" flags "${probe[@]:1}")
mapfile -t train_flags <<<"$flags_text"

# train.py first: it also exports the model that part (c) loads with --init-from.
part 150 "$work/train.log" "${torchrun[@]}" "$root/training_scripts/train.py" "${train_flags[@]}"
part 270 "$work/measure.log" "${torchrun[@]}" "${probe[@]:0:1}" measure "${probe[@]:1}"
grep -E '^(gpu_probe:|\([a-e]\))' "$work/measure.log"
if $dry_run; then
    echo "gpu_probe: dry run: tiny sizes on the CPU check that the probe works, not what the machine does"
fi

if $dry_run; then
    echo "(e) nccl-tests: not run (dry run)"
elif [[ $nproc -lt 2 ]]; then
    echo "(e) nccl-tests: not run (1 GPU: no byte crosses a link)"
elif ! command -v all_reduce_perf >/dev/null; then
    echo "(e) nccl-tests: not run (all_reduce_perf is not on PATH)"
else
    echo "(e) nccl-tests all_reduce_perf, 256 MB on $nproc GPUs in one process (absolute: its algbw, busbw):"
    timeout 30 all_reduce_perf -b 256M -e 256M -g "$nproc" | grep -E '^#  *[Ss]ize|^ +268435456|Avg bus' || true
fi
echo "gpu_probe: done in $((SECONDS - started)) s"
