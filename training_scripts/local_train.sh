#!/usr/bin/env bash
# `make local-train`: train the tiny preset on CPU with 2 processes (torchrun, gloo), interrupt it with
# SIGTERM as StopTrainingJob or a Spot reclaim would, resume from the checkpoint, load the model.
# Everything lands in ${LOCAL_RUN_DIR:-local-run}/.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
run_dir="$(realpath -m "${LOCAL_RUN_DIR:-local-run}")"
rm -rf "$run_dir"
mkdir -p "$run_dir/corpus"

# A small real-text corpus that exists offline: the Python standard library's own sources.
stdlib="$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
for module in argparse contextlib dataclasses functools json/__init__ logging/__init__ pathlib/__init__ \
              shutil textwrap typing; do
    [ -f "$stdlib/$module.py" ] && cp "$stdlib/$module.py" "$run_dir/corpus/$(echo "$module" | tr / _).py"
done
python "$here/prepare_data.py" --input "$run_dir/corpus" --output "$run_dir/data"

train=(torchrun --standalone --nproc_per_node=2 "$here/train.py"
    --model-preset tiny --seq-len 128 --micro-batch-size 4 --max-steps 120
    --learning-rate 3e-3 --lr-reference-batch-size 8 --warmup-steps 10
    --log-interval 10 --val-interval 40 --val-batches 4 --checkpoint-interval 30
    --train-dir "$run_dir/data/train" --val-dir "$run_dir/data/val"
    --checkpoint-dir "$run_dir/checkpoints" --model-dir "$run_dir/model"
    --tensorboard-dir "$run_dir/tensorboard")

echo "== Run 1: stopped on purpose with SIGTERM after its first checkpoint"
# Progress goes to stdout. torchrun reports the signal on stderr with a traceback and exits non-zero:
# expected here, so stderr goes to a file, shown only if the run ends before it is stopped.
signal_report="$run_dir/run1-stderr.log"
"${train[@]}" 2> "$signal_report" &
trainer=$!
until compgen -G "$run_dir/checkpoints/step_*/COMPLETE" > /dev/null; do
    if ! kill -0 "$trainer" 2> /dev/null; then
        cat "$signal_report" >&2
        echo "run 1 ended before its first checkpoint" >&2
        exit 1
    fi
    sleep 1
done
kill -TERM "$trainer"  # torchrun passes it on to every worker
wait "$trainer" || true
echo "== Run 1 stopped as intended; torchrun's report of the SIGTERM (a traceback, expected) is in $signal_report"

echo "== Run 2: resumes from the newest checkpoint and finishes"
"${train[@]}"

python - "$run_dir/model" <<'EOF'
import sys
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
print(f"== {sys.argv[1]} loads with AutoModelForCausalLM: {sum(p.numel() for p in model.parameters()):,} parameters")
EOF
