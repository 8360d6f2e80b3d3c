"""Where checkpoint folders live: a directory or an S3 prefix (trainstack.checkpoint_stores names the stores).

CheckpointManager (checkpoint.py) reads and writes folders `step_<N>` through one of these, so the same
save/resume/prune logic serves every store:

- `LocalStorage`, node-local (`sagemaker-sync`: each node writes its own copy of /opt/ml/checkpoints,
  which SageMaker syncs with S3) or shared (`fsx`: one directory on the mounted file system that every
  node sees). A save is staged in `step_<N>.tmp` and renamed when complete.
- `S3Storage` (`s3-direct`, `s3-express`): DCP writes and reads the prefix through s3torchconnector's
  `S3StorageWriter`/`S3StorageReader`, each rank only its own shards. S3 has no rename: a save writes
  `step_<N>/` in place and is complete once the marker is written after DCP's `.metadata` (DCP writes
  that last, after every rank's shards).

The region is the job's (`AWS_REGION`, which SageMaker sets in training containers, or
`AWS_DEFAULT_REGION`); `AWS_ENDPOINT_URL` (read by s3torchconnector's client itself) points it at another
S3 endpoint, such as a local one in the tests, which then is addressed path-style.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from checkpoint_layout import FOLDER_PATTERN, MARKER
from data import UserError
from s3torchconnector import S3ClientConfig
from s3torchconnector._s3client import S3Client
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
from s3torchconnectorclient import S3Exception
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter, StorageReader, StorageWriter

# Threads each rank writes its shards with (DCP's default is 1). benchmarks/checkpoint_throughput.py, on a
# shared 2-core VM: DCP/raw 0.53-0.83 with 1 thread, 0.60-1.01 with 4 (docs/training.md); measure there.
WRITE_THREADS = 4
S3_SCHEME = "s3://"
IN_PROGRESS = ".tmp"


def is_s3_uri(location: str) -> bool:
    return str(location).startswith(S3_SCHEME)


class LocalStorage:
    """Checkpoint folders in a directory; `shared`: every node sees the same directory (FSx)."""

    stages = True  # a save goes to step_<N>.tmp, renamed once complete

    def __init__(self, root: str, shared: bool = False):
        self.root, self.shared = Path(root), shared

    def __str__(self) -> str:
        return str(self.root)

    def path(self, folder: str) -> str:
        return str(self.root / folder)

    def folders(self) -> list[str]:
        """Names of the step folders, including saves in progress."""
        return sorted(p.name for p in self.root.glob("step_*")) if self.root.is_dir() else []

    def has(self, folder: str, name: str) -> bool:
        return (self.root / folder / name).is_file()

    def read(self, folder: str, name: str) -> bytes:
        return (self.root / folder / name).read_bytes()

    def write(self, folder: str, name: str, data: bytes) -> None:
        """Atomically: a reader sees the whole file or none."""
        target = self.root / folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f"{target.name}{IN_PROGRESS}.{os.getpid()}")
        staged.write_bytes(data)
        os.replace(staged, target)

    def remove(self, folder: str) -> None:
        shutil.rmtree(self.root / folder, ignore_errors=True)

    def commit(self, staging: str, final: str) -> None:
        try:
            os.rename(self.root / staging, self.root / final)
        except FileNotFoundError:  # another node on a shared filesystem renamed it first
            pass

    def writer(self, folder: str) -> StorageWriter:
        return FileSystemWriter(self.root / folder, thread_count=WRITE_THREADS)

    def reader(self, folder: str) -> StorageReader:
        return FileSystemReader(self.root / folder)


class S3Storage:
    """Checkpoint folders under an S3 prefix (a general purpose or a directory bucket)."""

    stages = False  # S3 has no rename: the marker, written last, completes a folder

    def __init__(self, uri: str):
        bucket, _, prefix = uri.removeprefix(S3_SCHEME).partition("/")
        self.uri, self.bucket = uri, bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
        self.shared = True
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise UserError(f"--checkpoint-dir {uri}: set AWS_REGION to the bucket's region.")
        self.region = region
        self.config = S3ClientConfig(force_path_style=bool(os.environ.get("AWS_ENDPOINT_URL")))
        self.client = S3Client(region, s3client_config=self.config)

    def __str__(self) -> str:
        return self.uri

    def path(self, folder: str) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}{folder}"

    def folders(self) -> list[str]:
        # A delimiter listing needs a prefix ending in "/" in a directory bucket (S3 Express One Zone).
        found = set()
        for page in self.client.list_objects(self.bucket, self.prefix, delimiter="/"):
            found.update(p.removeprefix(self.prefix).rstrip("/") for p in page.common_prefixes)
        return sorted(name for name in found if name.startswith("step_"))

    def has(self, folder: str, name: str) -> bool:
        try:
            self.client.head_object(self.bucket, self._key(folder, name))
        except S3Exception:
            return False
        return True

    def read(self, folder: str, name: str) -> bytes:
        try:
            return self.client.get_object(self.bucket, self._key(folder, name)).read()
        except S3Exception as error:
            raise OSError(str(error)) from error

    def write(self, folder: str, name: str, data: bytes) -> None:
        """A PUT is atomic: a reader sees the whole object or none."""
        with self.client.put_object(self.bucket, self._key(folder, name)) as stream:
            stream.write(data)

    def remove(self, folder: str) -> None:
        for page in self.client.list_objects(self.bucket, f"{self.prefix}{folder}/"):
            for info in page.object_info:
                self.client.delete_object(self.bucket, info.key)

    def writer(self, folder: str) -> StorageWriter:
        return S3StorageWriter(self.region, self.path(folder), self.config, thread_count=WRITE_THREADS)

    def reader(self, folder: str) -> StorageReader:
        return S3StorageReader(self.region, self.path(folder), self.config)

    def _key(self, folder: str, name: str) -> str:
        return f"{self.prefix}{folder}/{name}"


Storage = LocalStorage | S3Storage


def open_storage(location: str, shared: bool = False) -> Storage:
    """The storage at `location`: an s3:// prefix or a directory (`shared` by every node, as on FSx)."""
    return S3Storage(location) if is_s3_uri(location) else LocalStorage(location, shared)


def complete_folders(storage: Storage) -> list[str]:
    """Folders whose save finished (their marker is written), newest first."""
    folders = [f for f in storage.folders() if not f.endswith(IN_PROGRESS)]
    return [f for f in sorted(folders, reverse=True) if storage.has(f, MARKER)]


def checkpoints_at(location: str) -> tuple[Storage, list[str]]:
    """The complete checkpoints a resume source names, newest first, and the storage they lie in: a run's
    checkpoint dir (its complete `step_*` folders), or one checkpoint folder itself: exactly that one, if
    its marker is there (`s3://.../<run>/step_<N>/`, or a directory holding the marker, as SageMaker
    downloads such a prefix into a channel)."""
    if is_s3_uri(location):
        parent, _, name = str(location).rstrip("/").rpartition("/")
        parent, names_one = f"{parent}/", FOLDER_PATTERN.match(name) is not None
    else:
        parent, name = str(Path(location).parent), Path(location).name
        names_one = FOLDER_PATTERN.match(name) is not None or Path(location, MARKER).is_file()
    if names_one:
        folder = open_storage(parent)
        return folder, [name] if folder.has(name, MARKER) else []
    storage = open_storage(location)
    return storage, complete_folders(storage)


class _CountingStream:
    """A read stream that adds the bytes it returns to a counter."""

    def __init__(self, stream, counter: list[int]):
        self._stream, self._counter = stream, counter

    def read(self, *args):
        data = self._stream.read(*args)
        self._counter[0] += len(data)
        return data

    def readinto(self, buffer):
        count = self._stream.readinto(buffer)
        self._counter[0] += count or 0
        return count

    def __getattr__(self, name):
        return getattr(self._stream, name)


def counted(reader: StorageReader) -> tuple[StorageReader, list[int]]:
    """`reader` (FileSystemReader or S3StorageReader: both open their files through `fs.create_stream`)
    with the bytes of every stream it reads counted in the returned one-element list."""
    counter, open_stream = [0], reader.fs.create_stream

    @contextlib.contextmanager
    def create_stream(path, mode):
        with open_stream(path, mode) as stream:
            yield _CountingStream(stream, counter)

    reader.fs.create_stream = create_stream
    return reader, counter
