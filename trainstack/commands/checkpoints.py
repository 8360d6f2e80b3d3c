"""`trainstack checkpoints restore RUN [--step N] [--dry-run]`: bring back a run's checkpoint that a job
deleted or overwrote, from the versioned checkpoint bucket (trainstack/checkpoint_versions.py)."""

from __future__ import annotations

import argparse
from datetime import UTC

from trainstack import checkpoint_versions as versions
from trainstack.cli import COMMANDS
from trainstack.commands.common import (
    Pipeline,
    UsageError,
    add_pipeline_command,
    one_line_failures,
    subcommand_errors,
)
from trainstack.runs import RunError, stack_output

# The storage stack's output naming the bucket (stacks/storage/storage_stack.py).
CHECKPOINT_BUCKET_OUTPUT = "CheckpointBucketName"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "checkpoints",
        help=COMMANDS["checkpoints"][1],
        description="A run's checkpoints in the versioned checkpoint bucket.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_pipeline_command(
        actions,
        "restore",
        restore,
        summary="bring back the run's newest complete checkpoint (or --step N's) as it was saved",
        description="Bring back a run's checkpoint that a job deleted (SageMaker's checkpoint sync deletes "
        "in S3 what a job deletes locally) or overwrote: its newest complete one, or step N's, exactly as "
        "it was saved, from the checkpoint bucket's noncurrent versions (kept "
        "checkpoints.noncurrent_version_days). Deleted files come back by removing their delete markers, "
        "overwritten ones by copying their saved version back, files the save did not have get a delete "
        "marker; the COMPLETE marker comes back last. Starting the run again then resumes from it.",
        takes_run=True,
        arguments=_restore_arguments,
    )
    subcommand_errors(parser)


def _restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step", type=int, help="the step whose checkpoint to restore (default: the newest)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be restored, change nothing")
    parser.add_argument(
        "--checkpoint-bucket", help="skip the CloudFormation lookup of the storage stack's checkpoint bucket"
    )


@one_line_failures
def restore(args: argparse.Namespace) -> int:
    if args.step is not None and args.step < 0:
        raise UsageError(f"--step must be 0 or more, not {args.step}")
    pipeline = Pipeline.from_args(args)
    execution = pipeline.execution_of(args.run)
    run_name = pipeline.run_name_of(execution)
    if execution["status"] == "RUNNING" and not args.dry_run:
        raise RunError(
            f"run {run_name} is running: stop it first (trainstack stop {args.run}), since its job fetched "
            "its checkpoints when it started and would neither see the restored one nor leave it alone"
        )
    bucket = args.checkpoint_bucket or stack_output(
        pipeline.client("cloudformation"),
        f"{pipeline.settings.project}-storage",
        CHECKPOINT_BUCKET_OUTPUT,
        pipeline.region,
        "--checkpoint-bucket",
    )
    s3 = pipeline.client("s3")
    versions.require_versioning(s3, bucket)
    prefix = f"{run_name}/"
    where = f"s3://{bucket}/{prefix}"
    entries = versions.history(s3, bucket, prefix)
    if not entries:
        raise RunError(
            f"run {run_name} has nothing in {where}: it saved no checkpoint, or what it saved has expired "
            "(deleted ones stay restorable for checkpoints.noncurrent_version_days)"
        )
    saves = versions.saves(entries, prefix)
    if not saves:
        raise RunError(f"run {run_name} has no complete checkpoint in {where}, current or earlier")
    if args.step is not None and args.step not in saves:
        raise RunError(
            f"run {run_name} has no complete checkpoint of step {args.step} in {where}; steps it has: "
            + ", ".join(str(step) for step in sorted(saves))
        )
    save = saves[max(saves) if args.step is None else args.step]
    plan = versions.restore_of(save, entries)
    folder = f"{where}{save.folder.removeprefix(prefix)}"
    what = f"step {save.step} ({folder}, complete since {_time(save.marker)})"
    if not plan.needed:
        which = "its checkpoint" if args.step is not None else "its newest checkpoint"
        raise RunError(f"nothing to restore: {which}, {what}, is there as it was saved")
    if args.dry_run:
        print(f"would restore {what}:")
        for line in _actions(plan):
            print(f"  {line}")
        return 0
    versions.apply(s3, bucket, plan)
    print(f"restored {what}: {_summary(plan)}")
    print(f"`trainstack start --run-name {run_name}` resumes from it")
    return 0


def _time(entry: versions.Entry) -> str:
    return entry.modified.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _summary(plan: versions.Restore) -> str:
    undeleted = len({entry.key for entry in plan.undelete})
    copied = len(plan.copy_back) - 1  # the marker, copied last
    size = sum(entry.size for entry in plan.save.files)
    parts = [f"{len(plan.save.files)} file(s), {size / 2**20:,.1f} MiB"]
    if undeleted:
        parts.append(f"{undeleted} undeleted")
    if copied:
        parts.append(f"{copied} copied back from the version saved")
    if plan.remove:
        parts.append(f"{len(plan.remove)} the save did not have removed (restorable)")
    return ", ".join(parts) + f", {versions.MARKER} written last"


def _actions(plan: versions.Restore) -> list[str]:
    undeleted = sorted({entry.key for entry in plan.undelete})
    return (
        [f"remove {key} (the save did not have it)" for key in plan.remove]
        + [f"undelete {key}" for key in undeleted]
        + [f"copy back {entry.key} (version {entry.version_id}, {_time(entry)})" for entry in plan.copy_back]
        + [_summary(plan)]
    )
