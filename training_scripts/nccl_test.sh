#!/usr/bin/env bash
# Entry point of the `nccl-test` profile: one nccl-tests rank per GPU on every host, launched by the
# SageMaker toolkit's mpirun (strategy `mpi`). Hyperparameters arrive as `--name value` flags:
#   --operation      all_reduce (default) | all_gather | reduce_scatter | alltoall | broadcast
#   --min_bytes 8   --max_bytes 2G (16G needs 80 GB GPUs)   --step_factor 2
#   --iters 20      --warmup_iters 5                        --check 1 (0 skips result checking)
# Rank 0 prints the versions manifest and the NCCL/EFA settings, and copies its table into the model
# directory (model.tar.gz), so the bus bandwidth can be compared with docs/container.md.
set -euo pipefail

operation=all_reduce
min_bytes=8
max_bytes=2G
step_factor=2
iters=20
warmup_iters=5
check=1

while [[ $# -gt 0 ]]; do
    if [[ $# -lt 2 ]]; then
        echo "nccl_test.sh: $1 needs a value" >&2
        exit 2
    fi
    case "$1" in
        --operation) operation="$2" ;;
        --min_bytes) min_bytes="$2" ;;
        --max_bytes) max_bytes="$2" ;;
        --step_factor) step_factor="$2" ;;
        --iters) iters="$2" ;;
        --warmup_iters) warmup_iters="$2" ;;
        --check) check="$2" ;;
        *)
            echo "nccl_test.sh: unknown hyperparameter $1; allowed: operation, min_bytes, max_bytes," \
                 "step_factor, iters, warmup_iters, check" >&2
            exit 2
            ;;
    esac
    shift 2
done

case "${operation}" in
    all_reduce | all_gather | reduce_scatter | alltoall | broadcast) ;;
    *)
        echo "nccl_test.sh: operation must be one of all_reduce, all_gather, reduce_scatter, alltoall," \
             "broadcast, not '${operation}'" >&2
        exit 2
        ;;
esac

binary="${NCCL_TESTS_BIN:-/opt/nccl-tests/bin}/${operation}_perf"
command=("${binary}" -b "${min_bytes}" -e "${max_bytes}" -f "${step_factor}" -g 1
         -n "${iters}" -w "${warmup_iters}" -c "${check}")

if [[ "${OMPI_COMM_WORLD_RANK:-0}" != "0" ]]; then
    exec "${command[@]}"
fi

echo "nccl-test: ${OMPI_COMM_WORLD_SIZE:-1} ranks (one per GPU), ${operation}, ${min_bytes}..${max_bytes}"
if [[ -r /opt/trainstack/versions.json ]]; then
    echo "nccl-test: image versions $(tr -d '\n ' < /opt/trainstack/versions.json)"
fi
env | grep -E '^(NCCL|FI|OFI_NCCL)_' | sort | sed 's/^/nccl-test: env /' || true
result_file="${SM_MODEL_DIR:-/opt/ml/model}/${operation}_perf.txt"
mkdir -p "$(dirname "${result_file}")"
"${command[@]}" | tee "${result_file}"
