"""A run's checkpoints among the versions of the checkpoint bucket, and how to bring one back.

The bucket is versioned (stacks/storage/storage_stack.py): a file that SageMaker's checkpoint sync deleted
(because the job deleted it locally) or that a later write replaced stays there as a noncurrent version
for `checkpoints.noncurrent_version_days`. A checkpoint is what train.py means by one
(training_scripts/checkpoint_layout.py): a `step_<N>` folder under the run's prefix holding a COMPLETE
marker. Each version of a folder's marker is one finished save of that step; the save's files are, for
each key of the folder, the version that was there when the marker was written, or, for a key that had
none then, its first version written after the marker and before the marker changed again (SageMaker
uploads a node's files in no promised order, so a shard may land after the marker; several nodes each
upload their own marker, so the newest marker version is the one the whole save lies before).

Bringing a save back (S3 user guide, "Restoring previous versions" and "Managing delete markers"): a file
whose newer entries are only delete markers comes back by deleting those markers (DeleteObject with their
VersionId, no data copied); a file overwritten since is copied from its version onto itself (CopyObject
with the VersionId, as a managed multipart copy beyond 5 GB); a file the save did not have gets a delete
marker, so it is restorable in turn. The marker is then copied back last, as train.py writes it last: the
folder is never complete half-restored, and the new marker version dates the save as restored, so the same
rules find it intact afterwards. Functions take a boto3 S3 client, so tests run them against moto.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from training_scripts.checkpoint_layout import FOLDER_PATTERN, MARKER
from trainstack.runs import RunError


@dataclass(frozen=True)
class Entry:
    """One version of a key, or one delete marker (`deleted`)."""

    key: str
    version_id: str
    modified: datetime
    latest: bool
    deleted: bool
    size: int = 0


@dataclass(frozen=True)
class Save:
    """One finished save of a step: its marker's version and the version of each of its files."""

    step: int
    folder: str  # <run>/step_000000100/
    marker: Entry
    files: tuple[Entry, ...]  # the marker included


@dataclass
class Restore:
    """What bringing a save back does, file by file."""

    save: Save
    undelete: list[Entry] = field(default_factory=list)  # delete markers to remove
    copy_back: list[Entry] = field(default_factory=list)  # versions to copy onto their key, the marker last
    remove: list[str] = field(default_factory=list)  # current keys the save did not have

    @property
    def needed(self) -> bool:
        return bool(self.copy_back or self.remove)


def require_versioning(s3: Any, bucket: str) -> None:
    status = s3.get_bucket_versioning(Bucket=bucket).get("Status")
    if status != "Enabled":
        raise RunError(
            f"checkpoint bucket {bucket} is not versioned (versioning {status or 'never enabled'}), so "
            "what a job deleted or overwrote there is gone; deploy the storage stack of this trainstack, "
            "which versions it, to keep what is deleted from now on"
        )


def history(s3: Any, bucket: str, prefix: str) -> dict[str, list[Entry]]:
    """Every version and delete marker under `prefix`, by key, oldest first."""
    by_key: dict[str, list[Entry]] = defaultdict(list)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item, deleted in [(v, False) for v in page.get("Versions", [])] + [
            (m, True) for m in page.get("DeleteMarkers", [])
        ]:
            by_key[item["Key"]].append(
                Entry(
                    item["Key"],
                    item["VersionId"],
                    item["LastModified"],
                    item["IsLatest"],
                    deleted,
                    item.get("Size", 0),
                )
            )
    # LastModified has whole seconds (S3 API reference, ListObjectVersions examples: ...T17:50:30.000Z):
    # within one second, the latest entry is the newest.
    return {key: sorted(entries, key=lambda e: (e.modified, e.latest)) for key, entries in by_key.items()}


def saves(entries: dict[str, list[Entry]], prefix: str) -> dict[int, Save]:
    """The newest save of each step that has one (a version of its marker), by step."""
    folders: dict[str, dict[str, list[Entry]]] = defaultdict(dict)
    for key, versions in entries.items():
        folder, _, rest = key.removeprefix(prefix).partition("/")
        if FOLDER_PATTERN.match(folder) and rest:
            folders[folder][key] = versions
    found = {}
    for folder, keys in folders.items():
        markers = [e for e in keys.get(f"{prefix}{folder}/{MARKER}", []) if not e.deleted]
        if markers:
            step = int(FOLDER_PATTERN.match(folder).group(1))
            found[step] = _save_of(step, f"{prefix}{folder}/", markers[-1], keys)
    return found


def _save_of(step: int, folder: str, marker: Entry, keys: dict[str, list[Entry]]) -> Save:
    marker_entries = keys[marker.key]
    later = [e.modified for e in marker_entries[marker_entries.index(marker) + 1 :]]
    marker_changed = later[0] if later else None
    files = [marker]
    for key, entries in keys.items():
        if key == marker.key:
            continue
        then = [e for e in entries if e.modified <= marker.modified]
        if then and not then[-1].deleted:
            files.append(then[-1])
            continue
        uploaded_after = [
            e
            for e in entries
            if not e.deleted
            and e.modified > marker.modified
            and (marker_changed is None or e.modified < marker_changed)
        ]
        if uploaded_after:
            files.append(uploaded_after[0])
    return Save(step, folder, marker, tuple(sorted(files, key=lambda e: e.key)))


def restore_of(save: Save, entries: dict[str, list[Entry]]) -> Restore:
    """What makes `save` the folder's current content again (nothing when it already is)."""
    restore = Restore(save)
    wanted = {e.key for e in save.files}
    for entry in save.files:
        versions = entries[entry.key]
        newer = versions[versions.index(entry) + 1 :]
        if entry.key == save.marker.key or not newer:
            continue
        if all(e.deleted for e in newer):
            restore.undelete.extend(newer)
        else:
            restore.copy_back.append(entry)
    for key, versions in entries.items():
        if key.startswith(save.folder) and key not in wanted and not versions[-1].deleted:
            restore.remove.append(key)
    if restore.undelete or restore.copy_back or restore.remove or not save.marker.latest:
        restore.copy_back.append(save.marker)
    return restore


def apply(s3: Any, bucket: str, restore: Restore) -> None:
    """Carry out `restore`, in the order of its lists (the marker last)."""
    for key in restore.remove:
        s3.delete_object(Bucket=bucket, Key=key)
    for entry in restore.undelete:
        s3.delete_object(Bucket=bucket, Key=entry.key, VersionId=entry.version_id)
    for entry in restore.copy_back:
        s3.copy({"Bucket": bucket, "Key": entry.key, "VersionId": entry.version_id}, bucket, entry.key)
