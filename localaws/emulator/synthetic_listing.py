"""Synthetic ListObjectsV2 pages: a prefix of any number of objects that exist only as a listing, answered
page by page on demand (nothing stored), for the dataset manifest's scale scenarios.

    prefix = SyntheticPrefix("datasets-bucket", "datasets/big/", objects=1_000_000)
    install_synthetic_listing(prefix, monkeypatch)     # moto's S3 answers ListObjectsV2 from it
    manifest_of(prefix.entries())                      # the reference, with trainstack.manifest

Object i has the key `<prefix><i, 9 digits>.bin` (ascending, so S3's UTF-8 key order is index order), the
ETag `"<MD5 of its index>"` (quoted, as S3 returns it) and the size i mod 4,096. Behaviour from botocore's
s3 model (ListObjectsV2): at most MaxKeys (default 1,000) objects a page, `IsTruncated` and an opaque
`NextContinuationToken` while objects remain, `KeyCount`; an empty `continuation-token` is refused as
moto refuses it. Requests for any other bucket or prefix go to moto's own S3 unchanged. Assumed: the
token's form (S3's is opaque; here `synthetic-<next index>`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from trainstack.manifest import ManifestEntry

_TOKEN_PREFIX = "synthetic-"
_DEFAULT_MAX_KEYS = 1000
_LAST_MODIFIED = "2026-12-01T00:00:00.000Z"


@dataclass(frozen=True)
class SyntheticPrefix:
    bucket: str
    prefix: str
    objects: int

    def entry(self, index: int) -> ManifestEntry:
        etag = '"' + hashlib.md5(str(index).encode()).hexdigest() + '"'
        return ManifestEntry(f"{self.prefix}{index:09d}.bin", etag, index % 4096)

    def entries(self) -> Iterator[ManifestEntry]:
        return (self.entry(index) for index in range(self.objects))

    def page(self, start: int, max_keys: int) -> dict:
        """The ListObjectsV2 result from object `start` on."""
        end = min(self.objects, start + max_keys)
        contents = [
            {
                "Key": entry.key,
                "LastModified": _LAST_MODIFIED,
                "ETag": entry.etag,
                "Size": entry.size,
                "StorageClass": "STANDARD",
            }
            for entry in map(self.entry, range(start, end))
        ]
        result = {
            "Name": self.bucket,
            "Prefix": self.prefix,
            "MaxKeys": max_keys,
            "KeyCount": len(contents),
            "IsTruncated": end < self.objects,
            "Contents": contents,
        }
        if end < self.objects:
            result["NextContinuationToken"] = f"{_TOKEN_PREFIX}{end}"
        return result


def install_synthetic_listing(prefix: SyntheticPrefix, monkeypatch) -> list[int]:
    """Route moto's ListObjectsV2 of `prefix.bucket` under `prefix.prefix` to the synthetic pages. Returns
    the list of each answered page's first index, for tests that count calls."""
    from moto.core.responses import ActionResult
    from moto.s3.exceptions import InvalidContinuationToken
    from moto.s3.responses import S3Response

    original = S3Response.list_objects_v2
    answered: list[int] = []

    def list_objects_v2(self):
        query = self._get_querystring(self.request, self.uri)
        requested = query.get("prefix", [""])[0]
        requested = requested.decode() if isinstance(requested, bytes) else requested
        if self.bucket_name != prefix.bucket or requested != prefix.prefix:
            return original(self)
        token = self.querystring.get("continuation-token", [None])[0]
        if token is not None and not token.startswith(_TOKEN_PREFIX):
            raise InvalidContinuationToken()
        start = int(token.removeprefix(_TOKEN_PREFIX)) if token else 0
        max_keys = int(self.querystring.get("max-keys", [_DEFAULT_MAX_KEYS])[0])
        answered.append(start)
        self.data["Action"] = "ListObjectsV2"
        return self.serialized(ActionResult(prefix.page(start, max_keys)))

    monkeypatch.setattr(S3Response, "list_objects_v2", list_objects_v2)
    return answered
