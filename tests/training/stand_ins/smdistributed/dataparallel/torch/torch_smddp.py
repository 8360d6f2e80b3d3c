"""CPU stand-in for SMDDP's `smdistributed.dataparallel.torch.torch_smddp` (test-only).

The real module exists only in AWS's SageMaker images; importing it registers the `smddp`
process-group backend. This stand-in registers an `smddp` backend that is gloo underneath, so
train.py's SMDDP path runs on CPU, and enforces what AWS documents the real backend cannot do
("Use the SMDDP library in your PyTorch training script",
https://docs.aws.amazon.com/sagemaker/latest/dg/data-parallel-modify-sdp-pt.html):

    "The smddp backend currently does not support creating subprocess groups with the
    torch.distributed.new_group() API. You also cannot use the smddp backend concurrently with
    other process group backends such as NCCL and Gloo."

So once this module is imported, the first process group created must be the default group on
`smddp`, and creating any further group (new_group, DeviceMesh's groups, a second backend) raises.

The backend is registered without `devices`, as SMDDP registers it (assumed: the project's facts, round 5;
SMDDP's code is not public): torch 2.5.1 then takes it to serve the host and CUDA (register_backend), and a
group on plain "smddp" would serve object collectives on the host (`_get_pg_default_device`), which the
GPU-only real backend cannot take. train.py names the device ("cuda:smddp"; on this CPU stand-in
"cpu:smddp"); a group given as "<device>:smddp" pairs is still the one smddp group.

Not enforced, because a CPU run has no other device: the real backend's collectives run on CUDA
tensors (assumed: AWS documents GPU instances only), so host tensors given to it would fail.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

RESTRICTION = (
    "smddp stand-in: the smddp backend cannot create process subgroups (torch.distributed.new_group) "
    "or run beside other backends such as NCCL and Gloo (AWS, 'Use the SMDDP library in your PyTorch "
    "training script')"
)
_groups_created = 0
_create_group = c10d._new_process_group_helper


def _only_the_default_smddp_group(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
    """Every process group torch.distributed creates passes here (init_process_group and new_group)."""
    global _groups_created
    backends = {pair.split(":")[-1] for pair in str(backend).lower().split(",")}  # "smddp", "cpu:smddp"
    if _groups_created or backends != {"smddp"}:
        raise RuntimeError(f"{RESTRICTION}; asked for a group on backend {backend!r}.")
    _groups_created += 1
    return _create_group(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)


def _create_smddp_backend(store, rank, world_size, timeout):
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


c10d._new_process_group_helper = _only_the_default_smddp_group
dist.Backend.register_backend("smddp", _create_smddp_backend)
