"""Which rank a hang waits for: at its watchdog's trip every rank leaves where its training thread stands in
the job's c10d store, reads its peers' entries, and names in its failure sentence the ranks that were not
waiting in a collective (the ones the others wait for), where they were and on which host.

The store is the one the default process group was created with (`init_process_group`'s env:// rendezvous:
under torchrun the TCPStore of torchrun's agent, which outlives the workers; under mpirun and SMDDP,
assumed, the TCPStore that rank 0 hosts at MASTER_ADDR; docs/training.md, "Naming the culprit"). Without
one (a world of one, or a store that no longer answers) a rank reports its own position only, as before.

"Waiting in a collective": a frame below our innermost one lies in torch.distributed (a c10d collective,
FSDP's hooks) or in DDP's module (its buffer broadcast). A rank blocked on a collective that C++ issued
(DDP's gradient all-reduce inside backward, a CUDA sync on a stuck NCCL kernel) shows no such frame and is
named too: the ranks named are those not seen waiting, a superset of the culprits; the ranks seen waiting
are left out. A rank that left no entry within PEER_WAIT_SECONDS (its watchdog could not run: the process
is gone, or a C call holds the GIL) is named as such.
"""

import json
import logging
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

KEY_PREFIX = "trainstack/hang-position/"
HOST_KEY_PREFIX = "trainstack/host/"
# Every rank of a hung job trips within moments of the others (their last step ended in the same
# collective): this long a rank waits for its peers' entries before it reports without them.
PEER_WAIT_SECONDS = 5.0
POLL_SECONDS = 0.1
NAMED_AT_MOST = 4  # ranks described with their position; FailureReason keeps 1024 characters
COLLECTIVE_CODE = ("torch/distributed/", "torch/nn/parallel/distributed.py")

log = logging.getLogger("train")


@dataclass(frozen=True)
class Position:
    rank: int
    host: str
    where: str  # watchdog.training_thread_position
    waiting: bool  # inside a collective (the module docstring)


def this_host() -> str:
    """The host's name in the job: SageMaker's `algo-N` (the toolkit's SM_CURRENT_HOST), else the hostname."""
    return os.environ.get("SM_CURRENT_HOST") or socket.gethostname()


def hosts_of_ranks() -> list[str]:
    """Every rank's host, through the default group's store (no collective: the store takes any backend)."""
    store, rank = dist.distributed_c10d._get_default_store(), dist.get_rank()
    store.set(f"{HOST_KEY_PREFIX}{rank}", this_host())
    return [store.get(f"{HOST_KEY_PREFIX}{peer}").decode() for peer in range(dist.get_world_size())]


def in_collective(stack: traceback.StackSummary, ours: int) -> bool:
    """Whether a frame below `stack[ours]` (our innermost frame) runs collective code."""
    return any(
        any(part in Path(entry.filename).as_posix() for part in COLLECTIVE_CODE)
        for entry in stack[ours + 1 :]
    )


class PeerBoard:
    """The ranks' positions at a trip, in the default group's store."""

    def __init__(self, store: dist.Store, world_size: int):
        self.store, self.world_size = store, world_size

    @classmethod
    def of_default_group(cls) -> "PeerBoard | None":
        """None in a world of one, or where the default group has no store."""
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return None
        try:
            store = dist.distributed_c10d._get_default_store()
        except (RuntimeError, ValueError):
            return None
        return cls(store, dist.get_world_size())

    def exchange(self, own: Position, clock=time.monotonic) -> dict[int, Position]:
        """Leave `own`, then every rank's position that arrived within PEER_WAIT_SECONDS (own at least)."""
        positions = {own.rank: own}
        try:
            self.store.set_timeout(timedelta(seconds=PEER_WAIT_SECONDS))  # the job ends after this anyway
            self.store.set(f"{KEY_PREFIX}{own.rank}", json.dumps(asdict(own)))
            deadline = clock() + PEER_WAIT_SECONDS
            while len(positions) < self.world_size and clock() < deadline:
                for rank in set(range(self.world_size)) - set(positions):
                    key = f"{KEY_PREFIX}{rank}"
                    if self.store.check([key]):
                        positions[rank] = Position(**json.loads(self.store.get(key)))
                time.sleep(POLL_SECONDS)
        except (RuntimeError, OSError) as error:  # DistStoreError, DistNetworkError: a RuntimeError
            log.warning("Rank %d could not exchange hang positions in the store (%s).", own.rank, error)
        return positions


def culprit_sentence(positions: dict[int, Position], world_size: int) -> str:
    """Who the ranks were waiting for, in words, most telling first."""
    stopped = sorted((p for p in positions.values() if not p.waiting), key=lambda p: p.rank)
    silent = sorted(set(range(world_size)) - set(positions))
    waiting = sorted(p.rank for p in positions.values() if p.waiting)
    parts = []
    if stopped:
        described = "; ".join(f"rank {p.rank} on {p.host} at {p.where}" for p in stopped[:NAMED_AT_MOST])
        more = f" and {len(stopped) - NAMED_AT_MOST} more" if len(stopped) > NAMED_AT_MOST else ""
        parts.append(f"Not waiting in a collective: {described}{more}.")
    if silent:
        parts.append(
            f"No position from {_ranks(silent)} within {PEER_WAIT_SECONDS:g} s (gone, or a C call held its "
            "Python interpreter)."
        )
    if waiting:
        if not stopped and not silent:
            first = positions[waiting[0]]
            parts.append(
                f"Every rank was waiting in a collective (a stuck network or device), rank {first.rank} on "
                f"{first.host} at {first.where}."
            )
        else:
            parts.append(f"Waiting in a collective: {_ranks(waiting)}.")
    return " ".join(parts)


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[: 2 * NAMED_AT_MOST])
    more = f" and {len(ranks) - 2 * NAMED_AT_MOST} more" if len(ranks) > 2 * NAMED_AT_MOST else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{more}"
