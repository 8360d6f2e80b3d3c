"""Process group and model wrapping for the three strategies.

`smp` (SMP v2 tensor parallel + FSDP) and `smddp` (SMDDP collectives) only exist
in the SageMaker image; elsewhere the same flags fall back to NCCL (GPU) or gloo
(CPU) with FSDP2 or DDP, with a warning, so one script runs everywhere.

Groups: the default group trains. DCP gets a gloo group of its own, so that an async save's
collectives (from a background thread) never interleave with training's. SMDDP allows neither
(AWS: its backend cannot create subgroups with new_group() nor run beside NCCL or Gloo): under
`smddp` every collective runs on the one default group, with tensors on the GPU, and checkpoints
are saved synchronously between steps (flags.py refuses --async-checkpoint there).
"""

import contextlib
import importlib.util
import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from model import decoder_layers
from smp import smp_serves, wrap_smp
from torch.nn.parallel import DistributedDataParallel

try:  # FSDP2: public from PyTorch 2.6, composable-only in 2.5 (the SMP 2.8 image).
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

STRATEGIES = ("smp", "smddp", "torchrun")
PARALLELISMS = ("fsdp", "ddp")

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    strategy: str  # the strategy that actually runs, after any fallback
    backend: str
    rank: int
    world_size: int
    local_rank: int
    dp_rank: int  # ranks with the same dp_rank (a tensor-parallel group) read the same samples
    dp_size: int
    device: torch.device
    # DCP's collectives and the barriers around file writes: a gloo group, or None (the default group)
    # under smddp, which allows no other group
    checkpoint_group: dist.ProcessGroup | None

    @property
    def control_device(self) -> torch.device:
        """Where the small tensors of cross-rank checks live: the host (the default group has gloo for
        them), except under smddp, whose one backend takes GPU tensors only."""
        return self.device if self.strategy == "smddp" else torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def synchronize(self) -> None:
        """Wait until this rank's device has finished its queued work (GPU kernels run behind the host); on
        the host there is nothing to wait for."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def select_strategy(
    requested: str, smp_serves: bool, smddp_serves: bool, cuda: bool
) -> tuple[str, str, str | None]:
    """(strategy, process-group backend, fallback warning or None) for what this machine can run;
    `smp_serves`: torch.sagemaker is installed and runs on this machine's device (`smp.smp_serves`);
    `smddp_serves`: SMDDP is installed and its backend takes this machine's device (`_smddp_serves`)."""
    fallback_backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    if requested == "smp" and not smp_serves:
        return (
            "torchrun",
            fallback_backend,
            "SMP v2 (torch.sagemaker) needs the SageMaker image and a GPU; "
            "training with FSDP2/DDP on the standard backend instead.",
        )
    if requested == "smddp" and not smddp_serves:
        return (
            "torchrun",
            fallback_backend,
            "SMDDP (smdistributed.dataparallel) needs the SageMaker image and a "
            "GPU; training on the standard backend instead.",
        )
    if requested == "smddp":
        # The device named: torch 2.5.1 serves object collectives (and DCP's, and barriers) on the device
        # `_get_pg_default_device` picks, the host whenever the group's backend lists it, and a backend
        # registered without `devices` is taken to serve the host and CUDA (register_backend). SMDDP is
        # GPU-only, so its group must serve CUDA alone.
        return "smddp", f"{'cuda' if cuda else 'cpu'}:smddp", None
    return requested, fallback_backend, None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False


def _smddp_serves(device_type: str) -> bool:
    """Whether SMDDP is installed and registers its backend for `device_type` (the real one: CUDA)."""
    if not _installed("smdistributed.dataparallel"):
        return False
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  (registers the "smddp" backend)

    return device_type in dist.Backend.backend_capability.get("smddp", ())


def setup(requested: str, mp_parameters: dict, collective_timeout: timedelta | None = None) -> Runtime:
    """`collective_timeout`: of every collective on both groups (None: torch's default); train.py keeps it
    above the watchdog's bound, so that a stuck collective trips the watchdog first."""
    cuda = torch.cuda.is_available()
    device_type = "cuda" if cuda else "cpu"
    strategy, backend, warning = select_strategy(
        requested,
        requested == "smp" and smp_serves(device_type),
        requested == "smddp" and _smddp_serves(device_type),
        cuda,
    )
    # mpirun (SMDDP) names the local rank differently from torchrun.
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    if cuda:
        torch.cuda.set_device(local_rank)
    if strategy != "smddp" and "RANK" not in os.environ:  # plain `python train.py`: a world of one
        # In an in-memory store: no TCP port to pick, which another process could take between the pick
        # and the bind (EADDRINUSE).
        store = {"store": dist.HashStore(), "rank": 0, "world_size": 1}
    else:
        store = _restarted_round_store()
    dist.init_process_group(backend=backend, timeout=collective_timeout, **store)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    model_parallel_degree = 1
    if strategy == "smp":
        import torch.sagemaker as tsm

        tsm.init(mp_parameters or None)  # None: SMP reads the job's mp_parameters itself
        model_parallel_degree = int(mp_parameters.get("tensor_parallel_degree", 1)) * int(
            mp_parameters.get("context_parallel_degree", 1)
        )
    checkpoint_group = (
        None if strategy == "smddp" else dist.new_group(backend="gloo", timeout=collective_timeout)
    )
    runtime = Runtime(
        strategy=strategy,
        backend=backend,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        dp_rank=rank // model_parallel_degree,
        dp_size=world_size // model_parallel_degree,
        device=torch.device("cuda", local_rank) if cuda else torch.device("cpu"),
        checkpoint_group=checkpoint_group,
    )
    if warning and runtime.is_main:
        log.warning(warning)
    return runtime


def _restarted_round_store() -> dict:
    """After torchrun restarted the workers (in_job_restart.py), their rendezvous in torchrun's own store
    under a prefix of this round. torch 2.5.1 (the image's) prefixes it so itself (rendezvous.py:
    `/worker/attempt_<TORCHELASTIC_RESTART_COUNT>`); later versions share the agent's store across rounds
    without a prefix, and a restarted round then reads its predecessor's addresses (gloo: "Connection
    refused"). The same prefix on every version; a first round keeps torch's own rendezvous."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if restart == "0" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return {}
    world_size = int(os.environ["WORLD_SIZE"])
    agent_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False
    )
    store = dist.PrefixStore(f"/trainstack/round_{restart}", agent_store)
    return {"store": store, "rank": int(os.environ["RANK"]), "world_size": world_size}


def wrap_model(
    model: torch.nn.Module,
    runtime: Runtime,
    parallelism: str,
    mp_parameters: dict,
    activation_checkpointing: bool,
    compile_layers: bool,
    materialize: Callable[[torch.nn.Module], None],
    seed: int,
) -> torch.nn.Module:
    """Shard or replicate the meta-device `model`, then `materialize` (allocate and fill) this rank's part."""
    if activation_checkpointing:
        # transformers 5 renamed gradient_checkpointing_enable; 4.4x (the SMP image) has only the old name.
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if compile_layers:  # per block, in place: state-dict keys stay those of the plain model
        for layer in decoder_layers(model):
            layer.compile()
    if runtime.strategy == "smp":
        return wrap_smp(model, runtime.device, mp_parameters, seed)
    if parallelism == "ddp":
        materialize(model)
        return DistributedDataParallel(
            model, device_ids=[runtime.local_rank] if runtime.device.type == "cuda" else None
        )
    policy = fsdp_mixed_precision(runtime.device.type)
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    materialize(model)  # FSDP2 shards in place: each rank allocates only its shards
    return model


def fsdp_mixed_precision(device_type: str) -> MixedPrecisionPolicy:
    """FSDP2 on GPU gathers bf16 copies of the fp32 shards, layer by layer, and reduce-scatters fp32
    gradients: bf16 compute without autocast, whose weight cache would hold a bf16 copy of every
    gathered layer (the whole model) until the forward pass ends. On CPU everything stays fp32."""
    if device_type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def autocast_enabled(runtime: Runtime, parallelism: str) -> bool:
    """bf16 autocast around the forward pass: on GPU, for DDP only (FSDP2 and SMP's FSDP1 cast by their
    mixed-precision policies: fsdp_mixed_precision, smp.fsdp1_mixed_precision)."""
    return runtime.device.type == "cuda" and runtime.strategy != "smp" and parallelism == "ddp"


def agree(runtime: Runtime, problem: str | None) -> str | None:
    """The first rank's problem (a sentence) on every rank, or None if no rank has one.

    Checks that each rank makes on its own (files, directories) end the same way everywhere:
    every rank raises the same error instead of one failing and its peers hanging or tracing back.
    Device and group are explicit: one all-reduce finds the first rank with a problem, which then
    broadcasts its sentence's length and bytes, in tensors this module keeps (`_keep`).
    """
    group = runtime.checkpoint_group  # gloo; under smddp None: the default group, smddp's only one
    device = runtime.control_device
    flag = _keep(torch.tensor([runtime.world_size - runtime.rank if problem else 0], device=device))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if not flag.item():
        return None
    source = runtime.world_size - int(flag.item())
    encoded = problem.encode() if runtime.rank == source and problem else b""
    length = _keep(torch.tensor([len(encoded)], dtype=torch.int64, device=device))
    dist.broadcast(length, src=source, group=group)
    sentence = _keep(torch.zeros(int(length.item()), dtype=torch.uint8, device=device))
    if encoded:
        sentence.copy_(torch.frombuffer(bytearray(encoded), dtype=torch.uint8))
    dist.broadcast(sentence, src=source, group=group)
    return bytes(sentence.cpu().tolist()).decode()


# The tensors of the latest host collectives, kept from Python. torch 2.5.1 (the image's) frees a gloo
# collective's tensors in the group's worker thread once the work is done; where Python has already let a
# tensor go, that free needs the GIL. A group destroyed meanwhile holds the GIL while it joins that thread,
# and the process hangs at exit (seen: train.py's exit 2 on an empty train channel, both threads blocked).
# Kept here, a tensor outlives its work; each collective completes before the next agreement, so the last
# few suffice.
_KEPT: deque[torch.Tensor] = deque(maxlen=16)


def _keep(tensor: torch.Tensor) -> torch.Tensor:
    _KEPT.append(tensor)
    return tensor


def reduce_max(runtime: Runtime, values: torch.Tensor) -> torch.Tensor:
    """The element-wise maximum over all ranks of a small host tensor (flags, token ids), on the host.

    On the default group, never the checkpoint group: during an async save DCP's background thread
    runs collectives there, and these checks run every step."""
    values = _keep(values.to(runtime.control_device))
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values.cpu()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside DDP/FSDP1 (FSDP2 wraps in place)."""
    return getattr(model, "module", model)


def local_part(parameter: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter: its shard under FSDP2 (a DTensor), the whole one otherwise."""
    return parameter.to_local() if hasattr(parameter, "to_local") else parameter


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, enabled: bool):
    """DDP: skip the gradient all-reduce on all but the last micro-batch of an accumulation (DDP's
    gradients are full-size anyway). FSDP (FSDP2, SMP's FSDP1) reduce-scatters every micro-batch, as
    torchtitan does: skipping it would keep full-size unsharded fp32 gradients between micro-batches
    (+4 bytes per parameter per GPU; torchtitan#292), memory the planner does not count."""
    if enabled or not isinstance(model, DistributedDataParallel):
        yield
    else:
        with model.no_sync():
            yield


def settle(runtime: Runtime) -> None:
    """A last barrier on the checkpoint group (if any) and the default group, where every rank is known to
    arrive. torch 2.5.1 (the image's) destroys a gloo group holding the GIL, while its worker threads may
    still need the GIL to free the tensors of the last collective: the process then hangs at exit. A
    collective releases the GIL while it waits, so most of those frees finish first; the host checks'
    own tensors are kept besides (`_KEPT`), as a barrier alone left that hang possible."""
    for group in (runtime.checkpoint_group, None):
        if group is not None or dist.is_initialized():
            dist.barrier(group=group)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
