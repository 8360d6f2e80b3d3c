"""train.py's flags: SageMaker passes hyperparameters as `--name value`, defaults come from its environment.

Every value is checked here, before any process group or model exists: a mistake
ends the job at once in one sentence that names the flag and what it allows.
"""

import argparse
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from capacity_block import add_flags as add_capacity_block_flags
from checkpoint_storage import checkpoints_at, complete_folders, open_storage
from data import UserError
from distributed import PARALLELISMS, STRATEGIES
from flag_types import Parser, at_least, boolean, non_negative, number, positive
from model_shapes import PRESETS
from rank_health import add_flags as add_slow_host_flags
from smp import smp_flag_problem

log = logging.getLogger("train")


def _mp_parameters(text: str) -> dict:
    """SMP config as JSON, or as the toolkit passes a dict hyperparameter: `key=str(value),...`
    (sagemaker_training mapping.to_cmd_args), each value read back with the type str() wrote it in."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        pairs = [item.partition("=") for item in text.split(",")]
        value = (
            {key.strip(): _as_str_wrote_it(raw) for key, equals, raw in pairs}
            if all(key.strip() and equals for key, equals, _ in pairs)
            else None
        )
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object or key=value pairs such as tensor_parallel_degree=2, got {text!r}"
        )
    return value


# str() of Python's constants, as the toolkit writes a dict hyperparameter's booleans ("False" is truthy).
_PYTHON_CONSTANTS = {"True": True, "False": False, "None": None}


def _as_str_wrote_it(text: str):
    """The value whose str() is `text`: a number (JSON), True/False/None, else the text itself."""
    if text in _PYTHON_CONSTANTS:
        return _PYTHON_CONSTANTS[text]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _toolkit_pairs(mapping: dict) -> str:
    """How the toolkit writes a dict hyperparameter as one argument (sagemaker_training mapping.py)."""
    return ",".join(f"{key}={value}" for key, value in sorted(mapping.items()))


def resolve_mp_parameters(flag_text: str | None, environment_json: str | None) -> dict:
    """The SMP config with its JSON types. The toolkit sets it twice: as `--mp_parameters` in its
    `key=str(value)` form and, typed, as the JSON of SM_HP_MP_PARAMETERS. The JSON wins where both are the
    same hyperparameter (the JSON written out as the toolkit writes the flag gives the flag's text); a
    flag of its own (JSON, or pairs from a person) is read as given; neither: SMP's defaults."""
    try:
        from_environment = _mp_parameters(environment_json) if environment_json else None
    except argparse.ArgumentTypeError as error:
        raise UserError(f"SM_HP_MP_PARAMETERS: {error}.") from None
    if flag_text is None:
        return from_environment or {}
    if from_environment is not None and _toolkit_pairs(from_environment) == flag_text:
        return from_environment
    try:
        return _mp_parameters(flag_text)
    except argparse.ArgumentTypeError as error:
        raise UserError(f"Argument --mp-parameters: {error}.") from None


def add_platform_flags(add: Callable) -> None:
    """The flags the platform sets for any training script (the job request's hyperparameters) and the
    runtime library reads (trainstack_runtime): launch, checkpoint store, watchdog, outputs, drills."""
    env = os.environ.get
    add("--strategy", choices=STRATEGIES, default="torchrun", help="launch strategy of the pipeline profile")
    add(
        "--mp-parameters",
        help="SMP v2 config (JSON or key=value,...); defaults to SM_HP_MP_PARAMETERS",
    )
    add("--checkpoint-interval", type=positive, default=200)
    add(
        "--keep-checkpoints",
        type=at_least(
            2,
            "SageMaker deletes from S3 what is deleted locally, so with one a kill during "
            "the newest checkpoint's upload can leave none loadable",
        ),
        default=2,
        help="complete checkpoints kept (at least 2)",
    )
    add("--async-checkpoint", type=boolean, default=False, help="write checkpoints while training continues")
    add(
        "--checkpoint-dir",
        default="/opt/ml/checkpoints",
        help="a directory, or an s3:// prefix that DCP reads and writes directly (s3-direct, s3-express)",
    )
    add(
        "--checkpoint-dir-shared",
        type=boolean,
        default=False,
        help="every node sees the same --checkpoint-dir (a shared file system such as FSx): rank 0 alone "
        "renames, marks and prunes",
    )
    add(
        "--resume-from",
        default=env("SM_CHANNEL_RESUME"),
        help="another run's checkpoint dir (a directory or an s3:// prefix), or one step_* folder of it, to "
        "start from when --checkpoint-dir holds none; defaults to SM_CHANNEL_RESUME",
    )
    add(
        "--tensorboard-dir",
        default=os.path.join(env("SM_OUTPUT_DIR"), "tensorboard") if env("SM_OUTPUT_DIR") else None,
        help="rank 0 writes TensorBoard scalars here; defaults to SM_OUTPUT_DIR/tensorboard "
        "(/opt/ml/output/tensorboard, SageMaker's TensorBoardOutputConfig.LocalPath), else none",
    )
    add("--model-dir", default=env("SM_MODEL_DIR", "/opt/ml/model"))
    seconds = number(0, low_inclusive=False)
    add(
        "--watchdog",
        type=boolean,
        default=True,
        help="end a run whose ranks stop stepping (docs/training.md)",
    )
    add("--watchdog-step-multiple", type=number(1), default=10.0, help="bound: this x the median step time")
    add("--watchdog-min-seconds", type=seconds, default=300.0, help="bound after the first steps: at least")
    add("--watchdog-startup-seconds", type=seconds, default=1800.0, help="bound until 3 steps have completed")
    add("--watchdog-save-seconds", type=seconds, default=1800.0, help="bound of a save, validation, export")
    add("--collective-timeout-seconds", type=seconds, default=3600.0, help="the process groups' timeout")
    add("--inject-hang-at-step", type=positive, help="testing aid: --inject-hang-rank stops before this step")
    add("--inject-hang-rank", type=non_negative, default=0, help="testing aid: the rank that stops")
    add("--inject-hang-rounds", type=positive, default=1, help="testing aid: hang in this many job rounds")
    add(
        "--inject-save-delay-seconds",
        type=number(0),
        default=0.0,
        help="testing aid: each save first sleeps",
    )
    add_capacity_block_flags(add, number(0))


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = Parser(description="Train a Llama-family causal LM on uint16 token shards.", allow_abbrev=False)
    add = parser.add_argument
    add_platform_flags(add)
    add(
        "--parallelism",
        choices=PARALLELISMS,
        default="fsdp",
        help="data parallelism outside SMP: FSDP2 or DDP",
    )
    add(
        "--smp-implementation",
        type=boolean,
        default=False,
        help="SMP only: tsm.transform the model into SMP's own implementation (AWS's "
        "use_smp_implementation); its parameter names are SMP's, not Hugging Face's: refused until train.py "
        "maps them (docs/training.md)",
    )
    add("--model-preset", choices=list(PRESETS), default="125m")
    add("--init-from", help="directory with config.json (and weights) to start from instead of a preset")
    add("--vocab-size", type=positive, help="override the preset's vocabulary size")
    add(
        "--seq-len",
        type=positive,
        default=1024,
        help="tokens per sample; above the model's max_position_embeddings raises it (exported so)",
    )
    add("--micro-batch-size", type=positive, default=8, help="sequences per rank per forward pass")
    add("--grad-accum", type=positive, default=1, help="micro-batches per optimizer step")
    add("--max-steps", type=positive, default=1000)
    add(
        "--learning-rate",
        type=number(0, low_inclusive=False),
        default=3e-4,
        help="peak LR at --lr-reference-batch-size sequences",
    )
    add(
        "--lr-reference-batch-size",
        type=positive,
        default=256,
        help="global batch (sequences) the LR is given for; the LR scales linearly with the real one",
    )
    add("--warmup-steps", type=non_negative, default=100)
    add(
        "--min-lr-ratio",
        type=number(0, 1),
        default=0.1,
        help="final LR of the cosine decay, relative to the peak",
    )
    add("--weight-decay", type=number(0), default=0.1)
    add("--grad-clip", type=number(0), default=1.0, help="max gradient norm; 0 turns clipping off")
    add(
        "--max-nonfinite-steps",
        type=positive,
        default=3,
        help="consecutive steps with a non-finite loss or gradient norm (each skipped) before training stops",
    )
    add("--seed", type=int, default=0)
    add("--activation-checkpointing", type=boolean, default=False)
    add("--compile", type=boolean, default=False, help="torch.compile each decoder layer")
    add("--log-interval", type=positive, default=10)
    add("--val-interval", type=positive, default=200)
    add(
        "--val-batches",
        type=positive,
        default=20,
        help="validation covers the first val-batches x micro-batch-size val samples, whatever the ranks",
    )
    add(
        "--allow-global-batch-change",
        type=boolean,
        default=False,
        help="resume with another data-parallel size even where the checkpoint's global batch cannot be kept",
    )
    add("--profile-steps", help="FIRST-LAST (or one step): write a torch profiler trace of these steps")
    add(
        "--profile-dir",
        default=env("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"),
        help="where profiler traces go; defaults to SM_OUTPUT_DATA_DIR (uploaded with the job's output)",
    )
    add(
        "--dry-run",
        type=boolean,
        nargs="?",
        const=True,
        default=False,
        help="build, shard and initialize the model, print per-rank parameter bytes and peak RSS, exit",
    )
    add("--train-dir", default=env("SM_CHANNEL_TRAIN"), help="defaults to SM_CHANNEL_TRAIN")
    add("--val-dir", default=env("SM_CHANNEL_VAL"), help="optional; defaults to SM_CHANNEL_VAL")
    add(
        "--export-dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="dtype of the final model's weights (training keeps fp32 master weights either way)",
    )
    add_slow_host_flags(add, positive, number(1), boolean)
    return parser


def _normalized(argv: list[str]) -> list[str]:
    # SageMaker hyperparameter names usually use underscores; the flags use dashes.
    argv = [_dashed(arg) if arg.startswith("--") else arg for arg in argv]
    # argparse takes a value such as -1e-3 for a flag: join negative numbers to their flag.
    for index in reversed(range(len(argv) - 1)):
        if argv[index].startswith("--") and "=" not in argv[index] and _negative_number(argv[index + 1]):
            argv[index : index + 2] = [f"{argv[index]}={argv[index + 1]}"]
    return argv


def _is_sagemaker_setting(flag: str) -> bool:
    if flag.startswith("--sagemaker-"):  # the toolkit's own settings, should any reach the script
        log.warning("Ignoring SageMaker setting %s.", flag)
        return True
    return False


def parse_args(argv: list[str]) -> argparse.Namespace:
    args, unknown = build_parser().parse_known_args(_normalized(argv))
    for flag in [arg for arg in unknown if arg.startswith("--")]:
        if not _is_sagemaker_setting(flag):
            raise UserError(f"Unknown flag {flag}; run train.py --help for the accepted flags.")
    args.mp_parameters = resolve_mp_parameters(args.mp_parameters, os.environ.get("SM_HP_MP_PARAMETERS"))
    args.profile_steps = _profile_steps(args.profile_steps)
    for name in ("tensor_parallel_degree", "context_parallel_degree"):
        if int(args.mp_parameters.get(name, 1)) > 1:
            raise UserError(
                f"Argument --mp-parameters: {name} must be 1: train.py does not yet clip gradients and save "
                "checkpoints per tensor-parallel rank as SMP's examples do (docs/training.md)."
            )
    problem = smp_flag_problem(args)
    if problem:
        raise UserError(problem)
    _check_platform_flags(args)
    if args.init_from and not (Path(args.init_from) / "config.json").is_file():
        raise UserError(f"--init-from {args.init_from} holds no config.json.")
    if args.dry_run:
        return args
    _check_resume_source(args)
    if args.train_dir is None:
        raise UserError(
            "No train channel: attach a channel named 'train' (SM_CHANNEL_TRAIN) or pass --train-dir."
        )
    return args


def parse_platform_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, str]]:
    """The platform's flags (add_platform_flags) among a team script's arguments, checked as train.py's
    are, and every other `--name value` pair: the team's own hyperparameters, by name with underscores."""
    parser = Parser(description="trainstack's platform settings", allow_abbrev=False, add_help=False)
    add_platform_flags(parser.add_argument)
    args, rest = parser.parse_known_args(_normalized(argv))
    args.mp_parameters = resolve_mp_parameters(args.mp_parameters, os.environ.get("SM_HP_MP_PARAMETERS"))
    _check_platform_flags(args)
    _check_resume_source(args)
    hyperparameters = {}
    for index, flag in enumerate(rest):
        if not flag.startswith("--") or _is_sagemaker_setting(flag):
            continue
        name, equals, value = flag[2:].partition("=")
        if not equals:
            if index + 1 == len(rest) or rest[index + 1].startswith("--"):
                raise UserError(f"Hyperparameter --{name} has no value: pass it as --{name} VALUE.")
            value = rest[index + 1]
        hyperparameters[name.replace("-", "_")] = value
    return args, hyperparameters


def _check_platform_flags(args: argparse.Namespace) -> None:
    if args.strategy == "smddp" and args.async_checkpoint:
        raise UserError(
            "Argument --async-checkpoint: must be false with --strategy smddp (SMDDP allows one process "
            "group, and a background save's collectives would interleave with training's on it)."
        )
    longest = max(args.watchdog_startup_seconds, args.watchdog_save_seconds, args.watchdog_min_seconds)
    if args.collective_timeout_seconds <= longest:
        raise UserError(
            f"Argument --collective-timeout-seconds: must be above every fixed watchdog bound ({longest:g} s "
            "here), so that a stuck collective trips the watchdog before it times out."
        )


def _check_resume_source(args: argparse.Namespace) -> None:
    if (
        args.resume_from
        and not complete_folders(open_storage(args.checkpoint_dir))
        and not checkpoints_at(args.resume_from)[1]
    ):
        raise UserError(
            f"{resume_source(args)} holds no complete checkpoint: it must be a run's checkpoint dir "
            "(in the pipeline its prefix s3://<checkpoint-bucket>/<runName>/), whose step_* folders "
            "end with a COMPLETE marker, or one such folder."
        )


def _profile_steps(text: str | None) -> range | None:
    if text is None:
        return None
    first, dash, last = text.partition("-")
    if first.isdigit() and (not dash or last.isdigit()) and int(first) <= int(last or first):
        return range(int(first), int(last or first) + 1)
    raise UserError(
        f"Argument --profile-steps: expected a step or a range of steps such as 10-12, got {text!r}."
    )


def resume_source(args: argparse.Namespace) -> str:
    """How errors name the resume dir: by the channel SageMaker mounted or by the flag."""
    if args.resume_from == os.environ.get("SM_CHANNEL_RESUME"):
        return f"The resume channel ({args.resume_from})"
    return f"--resume-from {args.resume_from}"


def _negative_number(text: str) -> bool:
    try:
        return float(text) < 0
    except ValueError:
        return False


def _dashed(flag: str) -> str:
    name, equals, value = flag.partition("=")
    return name.replace("_", "-") + equals + value
