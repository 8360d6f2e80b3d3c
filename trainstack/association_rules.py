"""Which FSx for Lustre data repository associations can exist together on one file system.

"Two data repository associations cannot have overlapping file system paths", a file system path of `/`
allows one association only (CreateDataRepositoryAssociation FileSystemPath, botocore's fsx model), and each
association needs "a unique S3 bucket or prefix" (CreateDataRepositoryAssociation). Synth checks the links
it builds (stacks/storage/file_system_links.py); the deploy review checks the links that exist together
while CloudFormation updates a stack: it creates new ones before it deletes the old
(trainstack/deploy_changes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Association:
    """One data repository association: its name, file system directory and S3 location (a data repository
    path that is not plain text, such as a template's `Fn::Join`, compares as its JSON)."""

    name: str
    file_system_path: str
    data_repository_path: str


def _nested(inner: str, outer: str) -> bool:
    inner, outer = inner.rstrip("/") + "/", outer.rstrip("/") + "/"
    return inner.startswith(outer)


def conflict(first: Association, second: Association) -> str | None:
    """Why FSx refuses `first` and `second` on one file system, or None."""
    if "/" in (first.file_system_path, second.file_system_path):
        return (
            f"{first.name} and {second.name}: a file system path of / allows one data repository "
            "association only"
        )
    if _nested(first.file_system_path, second.file_system_path) or _nested(
        second.file_system_path, first.file_system_path
    ):
        return (
            f"{first.name} ({first.file_system_path}) and {second.name} ({second.file_system_path}): data "
            "repository associations cannot have overlapping file system paths"
        )
    if first.data_repository_path == second.data_repository_path:
        return (
            f"{first.name} and {second.name} link the same S3 location {first.data_repository_path}; each "
            "association needs its own"
        )
    return None


def links_problem(associations: Sequence[Association]) -> str | None:
    """The first reason FSx would refuse these associations on one file system, or None."""
    for index, association in enumerate(associations):
        for other in associations[index + 1 :]:
            if problem := conflict(association, other):
                return problem
    return None
