"""A hang's reason names the ranks that were not waiting in a collective: positions exchanged in a real c10d
store (HashStore, the in-process kind) and the sentence built from them; the 2-rank hang itself runs in
test_watchdog.py."""

from __future__ import annotations

import itertools

import torch.distributed as dist
from hang_culprit import PEER_WAIT_SECONDS, PeerBoard, Position, culprit_sentence

STOPPED = Position(1, "algo-2", "data.py:80 in batch (np.fromfile(...))", waiting=False)
WAITING = Position(0, "algo-1", "train.py:108 in token_losses (...), inside torch/distributed/...", True)


def test_a_rank_reads_the_positions_its_peers_left_in_the_store():
    store = dist.HashStore()
    PeerBoard(store, 2).exchange(STOPPED, clock=itertools.count(step=PEER_WAIT_SECONDS).__next__)
    positions = PeerBoard(store, 2).exchange(WAITING)
    assert positions == {0: WAITING, 1: STOPPED}
    assert culprit_sentence(positions, 2) == (
        "Not waiting in a collective: rank 1 on algo-2 at data.py:80 in batch (np.fromfile(...)). "
        "Waiting in a collective: rank 0."
    )


def test_a_rank_that_left_no_position_is_named_once_the_wait_is_over():
    clock = itertools.count(step=1.0)  # a virtual second per look at the store
    positions = PeerBoard(dist.HashStore(), 3).exchange(WAITING, clock=clock.__next__)
    assert positions == {0: WAITING}
    assert next(clock) <= PEER_WAIT_SECONDS + 3
    assert culprit_sentence(positions, 3) == (
        f"No position from ranks 1, 2 within {PEER_WAIT_SECONDS:g} s (gone, or a C call held its Python "
        "interpreter). Waiting in a collective: rank 0."
    )


def test_when_every_rank_waits_the_network_or_a_device_is_named():
    positions = {0: WAITING, 1: Position(1, "algo-2", "train.py:140 in _agree", True)}
    assert culprit_sentence(positions, 2) == (
        "Every rank was waiting in a collective (a stuck network or device), rank 0 on algo-1 at "
        f"{WAITING.where}."
    )
