"""`trainstack` console script.

Only the chosen command's module is imported, so one command's dependency (boto3 for the AWS
commands) cannot break another (check-config, size-fsx).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

DESCRIPTION = (
    "Retrain large PyTorch models on Amazon SageMaker through the trainstack pipeline: check the "
    "platform config, size FSx for Lustre, start a retraining and follow it, list, stop and read "
    "the logs of runs, restore their checkpoints."
)
EPILOG = "`trainstack COMMAND --help` shows a command's options. Docs: README.md, docs/pipeline-usage.md."

# command -> (module in trainstack.commands, summary). Each module has add_parser(subparsers), which
# sets `handler` (args -> exit code) on the parsers it adds.
COMMANDS: dict[str, tuple[str, str]] = {
    "check-config": ("check_config", "validate a config file exactly as `make synth` does"),
    "size-fsx": ("size_fsx", "print the cheapest FSx for Lustre plan for a dataset and a read need"),
    "plan": ("plan", "will a profile fit its GPUs, its tokens/s, time, cost and goodput (reads AWS: --help)"),
    "start": ("start", "start a retraining (a pipeline execution); --wait follows it"),
    "runs": ("runs", "list recent runs: profile, status, attempt, job, instances, elapsed time"),
    "status": ("status", "print a run's status, current job and output"),
    "watch": ("status", "follow a run until it ends, one timestamped line per change"),
    "logs": ("logs", "print a run's training logs (CloudWatch); --follow until it ends"),
    "stop": ("stop", "stop a run; the pipeline's cleanup stops its training job"),
    "checkpoints": ("checkpoints", "restore a run's checkpoint that a job deleted or overwrote"),
    "report": ("report", "write a run's report: attempts, loss, throughput, cost on one HTML page"),
    "triggers": ("triggers", "the retrain-on-new-data trigger: pending window, last hash, run, events"),
    "models": ("models", "list registered model versions: evaluation loss, approval, lineage"),
    "approve": ("models", "approve a model version (VERSION --reason ...)"),
    "reject": ("models", "reject a model version (VERSION --reason ...)"),
}


def _overview() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainstack",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        metavar="COMMAND",
        choices=list(COMMANDS),
        help="one of: " + ", ".join(COMMANDS),
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"trainstack {_version()}")
    commands = "\n".join(f"  {name:<14}{summary}" for name, (_, summary) in COMMANDS.items())
    parser.description = f"{DESCRIPTION}\n\ncommands:\n{commands}"
    return parser


def _version() -> str:
    """The installed release (pyproject.toml's version; CHANGELOG.md and the tag v<version> name it)."""
    try:
        return version("trainstack")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of `trainstack COMMAND`, importing only that command's module."""
    parser = argparse.ArgumentParser(prog="trainstack", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    importlib.import_module(f"trainstack.commands.{COMMANDS[command][0]}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = _overview().parse_args(argv[:1] if argv and argv[0] in COMMANDS else argv)
    args = build_parser(chosen.command).parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
