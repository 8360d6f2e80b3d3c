"""A training set's manifest: what is under an S3 prefix, as one hash, an object count and a byte total.

The hash is a chain over the objects in ListObjectsV2 order (ascending UTF-8 key order, which Python's
`sorted` of the keys reproduces: UTF-8 preserves code-point order): starting from the SHA-256 of the
empty string, each object replaces the digest with

    SHA-256(digest + key + TAB + etag + LF)        (hex digests, UTF-8 text)

where etag is the object's ETag without its double quotes (S3 returns them quoted; stripping them keeps
the hash independent of how a client shows them). The Step Functions fragment
stacks/pipeline/dataset_manifest.py computes the same chain in JSONata with `$hash`, one ListObjectsV2
page at a time, in child executions of up to 3,000 pages that hand the digest on
(stacks/pipeline/manifest_listing.py): one `$hash` call per object keeps every hashed string under the
10,000 characters Step Functions' hash function accepts (a digest of 64, a key of at most 1,024 bytes,
an ETag of at most ~45), and chaining makes the result independent of where pages end. The same set of
keys with the same ETags gives the same hash; any upload, overwrite or deletion under the prefix changes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# The digest the chain starts from: SHA-256 of the empty string.
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()
# ListObjectsV2 page size for the fragment: 200 objects with 1,024-byte plain keys and every other field
# stay under Step Functions' 256 KiB payload limit for a task result (a page of keys larger as JSON is
# listed again in narrow pages: stacks/pipeline/manifest_listing.py). The hash does not depend on it.
PAGE_SIZE = 200


@dataclass(frozen=True)
class Manifest:
    """`hash` as above, the number of objects and their total size in bytes."""

    hash: str
    objects: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        """The shape the state machines assign to `$datasetManifest`."""
        return {"hash": self.hash, "objects": self.objects, "bytes": self.bytes}


@dataclass(frozen=True)
class ManifestEntry:
    key: str
    etag: str
    size: int


EMPTY_MANIFEST = Manifest(EMPTY_DIGEST, 0, 0)


def chained_digest(digest: str, key: str, etag: str) -> str:
    """The digest after one more object."""
    return hashlib.sha256(f"{digest}{key}\t{etag.replace(chr(34), '')}\n".encode()).hexdigest()


def manifest_of(entries: Iterable[ManifestEntry]) -> Manifest:
    """The manifest of these objects (any order: they are hashed in S3's key order)."""
    digest, objects, total = EMPTY_DIGEST, 0, 0
    for entry in sorted(entries, key=lambda item: item.key):
        digest = chained_digest(digest, entry.key, entry.etag)
        objects += 1
        total += entry.size
    return Manifest(digest, objects, total)


def listed_entries(s3_client: Any, bucket: str, prefix: str) -> list[ManifestEntry]:
    """Every object under `prefix`, read with ListObjectsV2 (boto3 client)."""
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [
        ManifestEntry(item["Key"], item["ETag"], item["Size"])
        for page in pages
        for item in page.get("Contents", [])
    ]


def prefix_manifest(s3_client: Any, bucket: str, prefix: str) -> Manifest:
    """The manifest of what is under s3://bucket/prefix now."""
    return manifest_of(listed_entries(s3_client, bucket, prefix))
