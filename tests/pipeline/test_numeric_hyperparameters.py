"""A numeric hyperparameter is read as train.py will read it, or refused: each spelling of max_steps goes
through (a) SageMaker's training toolkit and train.py's parser (their own code) to show what training would
run, (b) the CLI's input rules and (c) the synthesized state machine in the emulator. 99999999 steps plans
far above llama-1b-smddp's $300 cap, so every spelling of it is refused before any CreateTrainingJob:
plain digits by the cost cap, anything else by its form, and so is every name train.py reads as
max_steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sagemaker_training import environment, mapping, params

from localaws.sagemaker import COMPLETED, STARTING, TRAINING
from trainstack.cost_cap import over_cap_message, planned_cost_usd, run_steps
from trainstack.execution_input import InvalidInputError, validate_execution_input
from trainstack.prices import offline_training_prices

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training_scripts"))  # as in /opt/ml/code
from data import UserError  # noqa: E402
from flags import parse_args  # noqa: E402

PROFILE = "llama-1b-smddp"
STEPS = 99_999_999
MAX_STEPS_FORM = (
    "hyperparameters.max_steps must be a whole number of steps from 1 to 999999999 in plain digits, "
    'such as "1000" (no sign, spaces, leading zeros, decimal point or exponent).'
)
FLAG_SPELLING = (
    "hyperparameters names may not write max_steps, checkpoint_interval, seq_len, micro_batch_size, "
    "grad_accum or the reserved names with '-' for '_' or with '=' in them: train.py reads max-steps and "
    "max_steps=N as max_steps."
)
# train.py's refusal of what the toolkit makes of a JSON float ("99999999.0").
TRAIN_PY_REFUSES = "Argument --max-steps: invalid positive value: '99999999.0'."

# (id, max_steps as the input writes it, what train.py reads from it)
SPELLINGS = [
    ("plain", "99999999", STEPS),
    ("leading-space", " 99999999", STEPS),  # JSON allows whitespace around a number
    ("trailing-space", "99999999 ", STEPS),
    ("tab-and-newline", "\t99999999\n", STEPS),
    ("trailing-newline", "99999999\n", STEPS),  # Python's `$` matches before it
    ("plus-sign", "+99999999", STEPS),  # not JSON: the text itself, read by int()
    ("leading-zeros", "0099999999", STEPS),
    ("underscores", "99_999_999", STEPS),
    ("json-string", '"99999999"', STEPS),  # decoded to the text 99999999
    ("arabic-indic-digits", "٩٩٩٩٩٩٩٩", STEPS),  # int() reads any Unicode decimal digit
    ("exponent", "9.9999999e7", TRAIN_PY_REFUSES),  # decoded to 99999999.0, passed as "99999999.0"
    ("decimal-point", "99999999.0", TRAIN_PY_REFUSES),
]


def train_py_reads(hyperparameters: dict[str, str], directory: Path, monkeypatch) -> int | str:
    """max_steps as train.py gets it from a job with these HyperParameters, or train.py's refusal. SageMaker
    writes them to /opt/ml/input/config/hyperparameters.json; the toolkit JSON-decodes each value
    (sagemaker-training environment.py read_hyperparameters), keeps its sagemaker_* settings apart
    (Environment: mapping.split_by_criteria) and passes the rest as flags (mapping.to_cmd_args)."""
    path = directory / "hyperparameters.json"
    path.write_text(json.dumps(hyperparameters))
    monkeypatch.setattr(environment, "hyperparameters_file_dir", str(path))
    decoded = environment.read_hyperparameters()
    script = mapping.split_by_criteria(
        decoded, keys=params.SAGEMAKER_HYPERPARAMETERS, prefix=params.SAGEMAKER_PREFIX
    ).excluded
    try:
        return parse_args([*mapping.to_cmd_args(script), "--train-dir", str(directory)]).max_steps
    except UserError as refusal:
        return str(refusal)


def assert_refused_before_any_job(interpreter, pipeline, hyperparameters: dict[str, str], cause: str) -> None:
    """The CLI's rules and the synthesized machine refuse the run with `cause`, and no job is created."""
    execution_input = {"profile": PROFILE, "runName": "trainstack-steps", "hyperparameters": hyperparameters}
    with pytest.raises(InvalidInputError) as refused:
        validate_execution_input(execution_input, pipeline.settings, "steps")
    assert str(refused.value) == cause
    sm = interpreter()
    outcome = sm.run(execution_input, name="steps")
    assert (outcome.status, outcome.error, outcome.cause) == ("FAILED", "InvalidInput", cause)
    assert sm.fake.create_calls == 0


@pytest.mark.parametrize(
    ("spelling", "trained"), [case[1:] for case in SPELLINGS], ids=[c[0] for c in SPELLINGS]
)
def test_every_spelling_of_a_run_over_the_cap_is_refused_before_any_job(
    interpreter, pipeline, tmp_path, monkeypatch, spelling, trained
):
    assert train_py_reads({"max_steps": spelling}, tmp_path, monkeypatch) == trained
    profile = pipeline.settings.profile(PROFILE)
    over_cap = over_cap_message(
        planned_cost_usd(
            profile, {"max_steps": str(STEPS)}, None, offline_training_prices(pipeline.settings.region)
        ),
        PROFILE,
        profile.max_cost_usd,
    )
    cause = over_cap if spelling == str(STEPS) else MAX_STEPS_FORM
    assert_refused_before_any_job(interpreter, pipeline, {"max_steps": spelling}, cause)


@pytest.mark.parametrize(
    "hyperparameters",
    [{"max-steps": "99999999"}, {"max_steps=99999999": "1"}, {"max-steps=99999999": "1"}],
    ids=["dashed", "value-in-name", "dashed-value-in-name"],
)
def test_a_name_train_py_reads_as_max_steps_is_refused_before_any_job(
    interpreter, pipeline, tmp_path, monkeypatch, hyperparameters
):
    assert train_py_reads(hyperparameters, tmp_path, monkeypatch) == STEPS
    assert_refused_before_any_job(interpreter, pipeline, hyperparameters, FLAG_SPELLING)


def test_plain_digits_train_the_steps_the_cost_cap_planned(interpreter, pipeline, tmp_path, monkeypatch):
    execution_input = {
        "profile": PROFILE,
        "runName": "trainstack-steps",
        "hyperparameters": {"max_steps": "100"},
    }
    run = validate_execution_input(execution_input, pipeline.settings, "steps")
    sm = interpreter(job_scripts=[[STARTING, TRAINING, COMPLETED]])
    assert sm.run(execution_input, name="steps").status == "SUCCEEDED"
    (request,) = [call for call in sm.fake.created if call["TrainingJobName"] == "trainstack-steps-1"]
    planned_steps = run_steps(pipeline.settings.profile(PROFILE), run.hyperparameters)
    assert train_py_reads(request["HyperParameters"], tmp_path, monkeypatch) == planned_steps == 100
