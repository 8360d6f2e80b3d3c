"""Execution inputs and the InvalidInput cause each must produce, for the CLI's and the state machine's tests.

Causes are for the default config (project `trainstack`, profiles llama-7b-smp, llama-1b-smddp,
nccl-test, small-torchrun). Each case is (id, input, start of the expected cause).
"""

from __future__ import annotations

from typing import Any

MALFORMED_INPUTS: list[tuple[str, Any, str]] = [
    ("not-an-object", ["llama-7b-smp"], "The input must be a JSON object"),
    (
        "unknown-field",
        {"profile": "llama-7b-smp", "instanceType": "ml.p5.48xlarge"},
        "The input has unknown field(s) instanceType; allowed fields: profile, runName,",
    ),
    (
        "unknown-fields",
        {"instanceTypes": ["ml.p5.48xlarge"], "Profile": "x"},
        "The input has unknown field(s) Profile, instanceTypes; allowed fields: profile, runName,",
    ),
    ("profile-not-string", {"profile": 7}, "profile must be a string naming one of: llama-7b-smp,"),
    ("unknown-profile", {"profile": "gpt-5"}, "profile must be one of: llama-7b-smp, llama-1b-smddp,"),
    ("run-name-not-string", {"runName": 12}, "runName must be a string starting with 'trainstack-'."),
    ("run-name-without-prefix", {"runName": "my-run"}, "runName must start with 'trainstack-'"),
    ("run-name-bad-characters", {"runName": "trainstack-my_run"}, "runName may hold only letters, digits"),
    ("run-name-too-long", {"runName": "trainstack-" + "a" * 49}, "runName may hold only letters, digits"),
    ("run-name-trailing-hyphen", {"runName": "trainstack-run-"}, "runName may hold only letters, digits"),
    ("run-name-null", {"runName": None}, "runName must be a string starting with 'trainstack-'."),
    ("hyperparameters-not-object", {"hyperparameters": "lr=3e-4"}, "hyperparameters must be a JSON object"),
    (
        "hyperparameter-number",
        {"hyperparameters": {"learning_rate": 0.0003}},
        "hyperparameters values must be strings",
    ),
    (
        "hyperparameter-launch-flag",
        {"hyperparameters": {"sagemaker_program": "x.py"}},
        "hyperparameters may not set sagemaker_program,",
    ),
    (
        "reserved-name-with-a-value",
        {"hyperparameters": {"strategy=torchrun": "1"}},
        "hyperparameters names may not write max_steps, checkpoint_interval, seq_len, micro_batch_size,",
    ),
    (
        "hyperparameter-name-too-long",
        {"hyperparameters": {"x" * 257: "1"}},
        "hyperparameters names may have at most 256 characters",
    ),
    (
        "checkpoint-interval-auto",
        {"hyperparameters": {"checkpoint_interval": "auto"}},
        "hyperparameters.checkpoint_interval must be a whole number of steps from 1 to 999999999",
    ),
    (
        "checkpoint-interval-zero",
        {"hyperparameters": {"checkpoint_interval": "0"}},
        "hyperparameters.checkpoint_interval must be a whole number of steps from 1 to 999999999",
    ),
    (
        "seq-len-signed",
        {"hyperparameters": {"seq_len": "+2048"}},
        "hyperparameters.seq_len must be a whole number of tokens from 1 to 999999999 in plain digits",
    ),
    (
        "micro-batch-size-decimal",
        {"hyperparameters": {"micro_batch_size": "8.0"}},
        "hyperparameters.micro_batch_size must be a whole number of sequences from 1 to 999999999 in plain",
    ),
    (
        "grad-accum-leading-zero",
        {"hyperparameters": {"grad_accum": "04"}},
        "hyperparameters.grad_accum must be a whole number of micro-batches from 1 to 999999999 in plain",
    ),
    (
        "checkpoint-interval-spaced",
        {"hyperparameters": {"checkpoint_interval": " 200"}},
        "hyperparameters.checkpoint_interval must be a whole number of steps from 1 to 999999999 in plain",
    ),
    ("instance-count-zero", {"instanceCount": 0}, "instanceCount must be a whole number from 1 to 512."),
    ("instance-count-string", {"instanceCount": "2"}, "instanceCount must be a whole number from 1 to 512."),
    (
        "instance-count-fraction",
        {"instanceCount": 1.5},
        "instanceCount must be a whole number from 1 to 512.",
    ),
    (
        "instance-count-boolean",
        {"instanceCount": True},
        "instanceCount must be a whole number from 1 to 512.",
    ),
    ("max-runtime-zero", {"maxRuntimeHours": 0}, "maxRuntimeHours must be a number from 0.01 to 672"),
    (
        "max-runtime-over-28-days",
        {"maxRuntimeHours": 700},
        "maxRuntimeHours must be a number from 0.01 to 672",
    ),
    ("max-runtime-string", {"maxRuntimeHours": "2"}, "maxRuntimeHours must be a number from 0.01 to 672"),
    ("max-runtime-below-minimum", {"maxRuntimeHours": 0.001}, "maxRuntimeHours must be a number from 0.01"),
    ("resume-not-s3", {"resumeFrom": "https://example.com/ckpt"}, "resumeFrom must be an S3 URI"),
    ("resume-not-string", {"resumeFrom": 5}, "resumeFrom must be an S3 URI"),
    (
        "resume-not-normalized",
        {"resumeFrom": "s3://trainstack-checkpoints/trainstack-r0/../trainstack-search-nightly/"},
        "resumeFrom must be a normalized S3 URI, with no . or .. segment and no //.",
    ),
    (
        "spot-runtime-over-wait",
        {"profile": "small-torchrun", "maxRuntimeHours": 9},
        "maxRuntimeHours must be at most 8 for profile small-torchrun.",
    ),
    # A team's own code (trainstack.team_code): a digest and an entry point, nothing else.
    ("code-not-object", {"code": "fit.py"}, "code must be a JSON object"),
    (
        "code-with-a-location",
        {"code": {"digest": "a" * 64, "entry": "fit.py", "uri": "s3://elsewhere/code.tar.gz"}},
        "code must be a JSON object",
    ),
    (
        "code-digest-not-sha256",
        {"code": {"digest": "A" * 64, "entry": "fit.py"}},
        "code.digest must be 64 lowercase hex digits, the sha256 of a bundle in the team's code prefix "
        "s3://<artifact bucket>/code/trainstack/.",
    ),
    (
        "code-entry-leaves-the-code",
        {"code": {"digest": "a" * 64, "entry": "src/../../bin/x.py"}},
        "code.entry must be a relative path to a .py or .sh file of the bundle",
    ),
    ("code-entry-no-python", {"code": {"digest": "a" * 64, "entry": "fit"}}, "code.entry must be a relative"),
]
