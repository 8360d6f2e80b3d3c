"""The model registry's facts, in plain Python: each profile's model package group, the evaluation jobs'
names, the lineage a version carries in CustomerMetadataProperties and its limits (docs/registry.md).

Limits from botocore's sagemaker service model (shape CustomerMetadataMap): at most 50 entries, keys of
1-128 and values of 1-256 characters, both matching `[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*` (letters, spaces,
digits and `_.:/=+-@`: no comma, so lists are joined with spaces).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

from trainstack.faults import UNKNOWN_RETRIES
from trainstack.profiles import Profile
from trainstack.retry_policies import MAX_ATTEMPTS_LIMIT, MAX_FAULT_RETRIES

METADATA_MAX_ENTRIES = 50
METADATA_KEY_MAX_LENGTH = 128
METADATA_VALUE_MAX_LENGTH = 256
# Job names allow 63 characters (CreateTrainingJob TrainingJobName). A run's evaluation jobs are named
# `<run>-eval` (the first) and `<run>-eval<n>` (the n-th, a retry); where that is longer, the run name is cut
# and the first RUN_HASH_LENGTH hex digits of its SHA-256 go before the suffix, so that two long run names
# that differ only past the cut still name different jobs.
JOB_NAME_MAX_LENGTH = 63
EVALUATION_JOB_SUFFIX = "-eval"
RUN_HASH_LENGTH = 8
# The most evaluation jobs one run can try: every capacity attempt, infrastructure and unknown retry a profile
# may allow (trainstack.retry_policies, trainstack.faults).
EVALUATION_JOBS_LIMIT = MAX_ATTEMPTS_LIMIT + MAX_FAULT_RETRIES + UNKNOWN_RETRIES
# No training job matches: theirs end `-<attempt>`, Batch's `<attempt id>` (hexadecimal).
# (The group holds the job's number; empty for the first.)
EVALUATION_JOB_PATTERN = re.escape(EVALUATION_JOB_SUFFIX) + r"([0-9]*)$"
_EVALUATION_JOB = re.compile(EVALUATION_JOB_PATTERN)
EVALUATION_PROGRAM = "evaluate.py"
EVALUATION_FILE = "evaluation.json"  # training_scripts/evaluate.py writes it into the job's model dir
# Where each fact of a version's lineage lives in CustomerMetadataProperties.
UNKNOWN_CODE_VERSION = "unknown"  # the Dockerfile's default too
REPOSITORY = Path(__file__).resolve().parents[1]
# An evaluation metric `<name>` (evaluate.py's, or a profile's own) is recorded as `evaluation.<name>`.
METRIC_KEY_PREFIX = "evaluation."
LINEAGE_KEYS = {
    "run": "run.name",
    "execution": "run.executionArn",
    "jobs": "run.trainingJobs",
    "image": "image.uri",  # with its digest
    "imageDigest": "image.digest",  # present only when ECR could not resolve it: "unresolved"
    "config": "config.sha256",
    "code": "code.version",  # the git revision the app and its image were built from (code_version)
    "teamCode": "code.digest",  # the sha256 of the team's own code the run ran (trainstack.team_code), if any
    "trainingSet": "data.trainingSetManifest",
    "evaluationSet": "data.evaluationSetManifest",
    "checkpoint": "checkpoint.uri",
    "evaluationJob": "evaluation.jobName",
    "maxEvalTokens": "evaluation.maxTokens",  # the profile's max_eval_tokens
    "seqLen": "evaluation.seqLen",  # the seq_len the evaluation read samples of
    "loss": f"{METRIC_KEY_PREFIX}loss",
    "perplexity": f"{METRIC_KEY_PREFIX}perplexity",
    "tokens": f"{METRIC_KEY_PREFIX}tokens",
}


# Registrations of one group take turns (stacks/pipeline/registry/group_lease.py): a lease per group, held
# from the baseline lookup to the decision, longer than that section's calls and their retries can take
# (each call retries for about 4 minutes: machine_kit.retry_must_succeed_call); a waiting registration asks
# again every LEASE_WAIT_SECONDS.
LEASE_KEY = "group"
LEASE_SECONDS = 3600
LEASE_WAIT_SECONDS = 30


def lease_table_name(project: str) -> str:
    return f"{project}-registration-leases"


def evaluation_job_name(run_name: str, number: int = 1) -> str:
    """The run's `number`-th evaluation job (as the registration machine names it: evaluation_request.py)."""
    suffix = EVALUATION_JOB_SUFFIX + (str(number) if number > 1 else "")
    if len(run_name) + len(suffix) <= JOB_NAME_MAX_LENGTH:
        return run_name + suffix
    digest = hashlib.sha256(run_name.encode()).hexdigest()[:RUN_HASH_LENGTH]
    return f"{run_name[: JOB_NAME_MAX_LENGTH - len(suffix) - 1 - RUN_HASH_LENGTH]}-{digest}{suffix}"


def is_evaluation_job(name: str) -> bool:
    return _EVALUATION_JOB.search(name) is not None


def group_name(project: str, profile: str) -> str:
    """The profile's model package group (`<project>-<profile>`: both are lowercase letters, digits, -)."""
    return f"{project}-{profile}"


def config_hash(profile: Profile) -> str:
    """SHA-256 of the profile's settings as the config loaded them: changes whenever the profile does."""
    return hashlib.sha256(json.dumps(profile.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def code_version(repository: Path = REPOSITORY) -> str:
    """The git revision the image is built from (HEAD, `-dirty` with uncommitted changes to tracked
    files); UNKNOWN_CODE_VERSION outside a git checkout or without git."""
    try:
        revision = _git(repository, "rev-parse", "HEAD")
        changed = _git(repository, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return UNKNOWN_CODE_VERSION
    return f"{revision}-dirty" if changed else revision


def code_repository(repository: Path = REPOSITORY) -> str:
    """Where the code comes from: the git checkout's `origin` URL without any user name or password in it;
    UNKNOWN_CODE_VERSION without one."""
    try:
        url = _git(repository, "remote", "get-url", "origin")
    except (OSError, subprocess.CalledProcessError):
        return UNKNOWN_CODE_VERSION
    return re.sub(r"^([a-z+]+://)[^/@]*@", r"\1", url) or UNKNOWN_CODE_VERSION


def _git(repository: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repository), *arguments], capture_output=True, text=True, check=True
    ).stdout.strip()
