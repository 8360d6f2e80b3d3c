"""A team's own training code: packed reproducibly, stored by content hash in the team's code prefix, named by
a run's `code` input ({"digest": <sha256>, "entry": <path>}).

Where it lives: `s3://<artifact bucket>/code/<namespace>/<sha256>/sourcedir.tar.gz`. The prefix lies outside
every run's `<namespace>-*` prefix, which the jobs' role may write: a team's job can read its team's code,
never rewrite it, so a digest always names the bytes it was computed from. A run name cannot reach it either
(run names hold no `/`).

How it runs: the request names the tarball in the SageMaker training toolkit's `sagemaker_submit_directory`
hyperparameter and the entry in `sagemaker_program`, both JSON-encoded as the SageMaker Python SDK sends them.
The toolkit downloads the tarball with the job's role, extracts it into /opt/ml/code (its safe extract) and
launches the entry there with the profile's launcher (torchrun, the SMDDP launcher, mpirun), the same
environment and hyperparameters as train.py (sagemaker-training 5.1.4: environment.py reads both
hyperparameters, files.download_and_extract, entry_point.run). The input rules, the inner machines' request
check and the job role's S3 grant each accept only the team's own prefix and a 64-hex digest.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CODE_PREFIX = "code/"
BUNDLE_NAME = "sourcedir.tar.gz"  # the SageMaker Python SDK's name for a packed source_dir
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# The entry point, relative to the code's root: the profile's entry_point rule. The input rules also refuse a
# `.`, `..` or empty segment (input_rules.NOT_NORMALIZED): the toolkit runs the entry from /opt/ml/code.
ENTRY_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.(py|sh)$"
# The pipeline stack's output that names the team's code prefix (stacks/pipeline/code_access.py).
CODE_PREFIX_OUTPUT = "CodePrefix"
SUBMIT_DIRECTORY_HYPERPARAMETER = "sagemaker_submit_directory"
PROGRAM_HYPERPARAMETER = "sagemaker_program"
# Left out of a bundle: caches and version control, which change without the code changing.
SKIPPED_NAMES = frozenset(
    {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)
# Bundles above this are refused: code, not data (datasets go to the dataset bucket).
MAX_BUNDLE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CodeRef:
    """A run's `code` input, validated."""

    digest: str
    entry: str


@dataclass(frozen=True)
class Bundle:
    data: bytes
    digest: str
    files: int


def code_prefix(artifact_bucket: str, namespace: str) -> str:
    """The team's code prefix: every bundle of the namespace lies under it."""
    return f"s3://{artifact_bucket}/{code_key_prefix(namespace)}"


def code_key_prefix(namespace: str) -> str:
    return f"{CODE_PREFIX}{namespace}/"


def code_uri(artifact_bucket: str, namespace: str, digest: str) -> str:
    return f"{code_prefix(artifact_bucket, namespace)}{digest}/{BUNDLE_NAME}"


def code_hyperparameters(uri: str, entry: str) -> dict[str, str]:
    """The toolkit's two launch flags for a team's code, JSON-encoded like every launch flag."""
    return {SUBMIT_DIRECTORY_HYPERPARAMETER: f'"{uri}"', PROGRAM_HYPERPARAMETER: f'"{entry}"'}


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(DIGEST_PATTERN, value) is not None


def is_entry(value: Any) -> bool:
    """The entry's spelling; input_rules' `normalized` rule refuses its `.`, `..` and empty segments."""
    return isinstance(value, str) and re.fullmatch(ENTRY_PATTERN, value) is not None


def pack(directory: Path) -> Bundle:
    """The directory as a tar.gz whose bytes depend only on the files' relative paths, contents and
    executable bits: sorted members, mtime 0, owner 0/root, modes 0644/0755, gzip without name or time.
    Symbolic links and special files are refused (the toolkit skips links that leave the code directory;
    a bundle is what runs, so nothing is left implicit)."""
    root = directory.resolve()
    if not root.is_dir():
        raise ValueError(f"{directory} is not a directory")
    paths = sorted(_members(root), key=lambda path: path.relative_to(root).as_posix())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in paths:
            name = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
                continue
            content = path.read_bytes()
            info.size, info.mode = len(content), 0o755 if path.stat().st_mode & 0o100 else 0o644
            archive.addfile(info, io.BytesIO(content))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as compressed:
        compressed.write(raw.getvalue())
    data = packed.getvalue()
    if len(data) > MAX_BUNDLE_BYTES:
        raise ValueError(
            f"{directory} packs to {len(data)} bytes, above {MAX_BUNDLE_BYTES}: keep data out of the code "
            "directory (the dataset bucket holds data)"
        )
    files = sum(1 for path in paths if path.is_file())
    return Bundle(data, hashlib.sha256(data).hexdigest(), files)


def _members(root: Path):
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if any(part in SKIPPED_NAMES for part in relative.parts) or path.suffix == ".pyc":
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ValueError(f"{relative} is a link or a special file; a code directory holds files only")
        yield path


def upload(s3: Any, prefix: str, bundle: Bundle) -> tuple[str, bool]:
    """Put the bundle at its content address under the team's code `prefix` (s3://bucket/code/<namespace>/)
    unless it is there; (its URI, whether it was uploaded)."""
    uri = f"{prefix}{bundle.digest}/{BUNDLE_NAME}"
    artifact_bucket, _, key = uri.removeprefix("s3://").partition("/")
    try:
        s3.head_object(Bucket=artifact_bucket, Key=key)
        return uri, False
    except s3.exceptions.ClientError as error:
        if error.response["Error"]["Code"] not in ("404", "NoSuchKey", "NotFound"):
            raise
    # S3 refuses an object whose bytes do not match ChecksumSHA256 (S3 API reference, PutObject).
    checksum = base64.b64encode(bytes.fromhex(bundle.digest)).decode()
    s3.put_object(Bucket=artifact_bucket, Key=key, Body=bundle.data, ChecksumSHA256=checksum)
    return uri, True
