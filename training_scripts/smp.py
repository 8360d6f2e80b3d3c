"""SMP v2 (torch.sagemaker): the model wrapped as AWS's SMP v2 example wraps it.

The reference is amazon-sagemaker-examples @7378156,
training/distributed_training/pytorch/model_parallel_v2/shared-scripts/ (AWS below); line numbers are
that commit's:
- `tsm.init()` first (train_lib.py:426), then the seed (train_lib.py:460 `set_seed(args.seed)`);
- `tsm.transform(model)` only for SMP's own implementation (train_lib.py:516-534, `use_smp_implementation`,
  which tensor parallelism switches on at train_lib.py:428-429): it swaps transformers' modules for SMP's,
  whose parameter names are not Hugging Face's (here: --smp-implementation, refused, smp_flag_problem);
- `DelayedParamIniter(model)` after transform (train_lib.py:536-542), its hooks passed to FSDP;
- PyTorch FSDP (v1) with `MixedPrecision(param_dtype=bf16, reduce_dtype=bf16, buffer_dtype=fp32)`
  (train_lib.py:569-575), `use_orig_params` (train_lib.py:436-438, 599), the decoder layer as the
  wrapping unit (train_lib.py:556-562);
- the optimizer after wrapping (train_lib.py:635-639; torch 2.5.1 fully_sharded_data_parallel.py:152-154:
  "wrapping your module and then initializing your optimizer after").
"""

from functools import partial

import torch
import torch.distributed as dist
from model import decoder_layers, delayed_initializer, tied_names
from optimizer import clean_name

# Real SMP runs on CUDA only (AWS documents GPU instances); a stand-in may name the device types it serves.
_SMP_DEVICE_TYPES = ("cuda",)


def smp_serves(device_type: str) -> bool:
    """Whether torch.sagemaker is installed and serves `device_type` (the real one: CUDA)."""
    try:
        import torch.sagemaker as tsm
    except ImportError:
        return False
    return device_type in getattr(tsm, "SERVED_DEVICE_TYPES", _SMP_DEVICE_TYPES)


def fsdp1_mixed_precision(device_type: str):
    """AWS's policy on GPU (train_lib.py:569-575): FSDP1 keeps fp32 shards, all-gathers them as bf16,
    computes in bf16 without autocast and reduce-scatters bf16 gradients; buffers stay fp32 (Llama's
    rotary frequencies). On CPU, None: fp32 throughout, as every strategy runs there."""
    from torch.distributed.fsdp import MixedPrecision

    if device_type != "cuda":
        return None
    return MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.float32)


def wrap_smp(model: torch.nn.Module, device: torch.device, mp_parameters: dict, seed: int) -> torch.nn.Module:
    """The meta-device transformers `model` under FSDP1 with SMP's delayed parameter initialization: each
    module is allocated and initialized on `device` as FSDP shards it (peak: a rank's shards plus one
    decoder layer), from the same per-module seeds as DDP and FSDP2 (model.delayed_initializer).

    No tsm.transform: AWS calls it only for SMP's own implementation (train_lib.py:516-534), whose modules
    and parameter names are SMP's, and flags.py refuses --smp-implementation true (smp_flag_problem)."""
    from torch.sagemaker.delayed_param import DelayedParamIniter

    torch.manual_seed(seed)  # AWS train_lib.py:460 (set_seed); our initializer seeds each module by name
    initer = DelayedParamIniter(model, init_method_using_config=delayed_initializer(model, device, seed))
    with initer.validate_params_and_buffers_inited():
        return fsdp1_wrap(
            model,
            device,
            mp_parameters,
            param_init_fn=initer.get_param_init_fn(),
            post_param_init_fn=initer.get_post_param_init_fn(),
        )


def fsdp1_wrap(
    model: torch.nn.Module, device: torch.device, mp_parameters: dict, **init_hooks
) -> torch.nn.Module:
    """FSDP1 as the SMP path wraps the meta-device `model` (AWS's arguments, above); `init_hooks` materialize
    it: SMP's DelayedParamIniter's (wrap_smp), or model.delayed_initializer itself as `param_init_fn` where
    torch.sagemaker is absent (benchmarks/gpu_probe.py measures this path on PyPI's torch). The tie of any
    tied weights is checked after wrapping (check_ties)."""
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    hybrid = int(mp_parameters.get("hybrid_shard_degree", 0)) > 0
    tied = tied_names(model)
    wrapped = FullyShardedDataParallel(
        model,
        auto_wrap_policy=partial(
            transformer_auto_wrap_policy, transformer_layer_cls={type(decoder_layers(model)[0])}
        ),
        mixed_precision=fsdp1_mixed_precision(device.type),
        sharding_strategy=ShardingStrategy.HYBRID_SHARD if hybrid else ShardingStrategy.FULL_SHARD,
        # torch 2.5.1 FSDP1 needs a device: on CPU it refuses to pick one (_init_utils.py:398-402)
        device_id=device,
        use_orig_params=True,
        **init_hooks,
    )
    check_ties(tied, wrapped)
    return wrapped


def check_ties(tied: list[list[str]], wrapped: torch.nn.Module) -> None:
    """Every group of names that shared one parameter before wrapping (`tied`) shares one after it: else
    FSDP1 would have flattened two tensors, and training would update two copies of one weight."""
    after = [set(group) for group in tied_names(wrapped)]
    for group in tied:
        if not any(set(group) <= shared for shared in after):
            raise RuntimeError(
                f"{' and '.join(group)} are one tied parameter in the model but separate tensors after FSDP "
                "wrapping: training would update two copies of it."
            )


def smp_flag_problem(args) -> str | None:
    """What train.py refuses on the SMP path, as one sentence, or None."""
    if args.strategy != "smp":
        return None
    if args.mp_parameters.get("sm_activation_offloading"):
        # AWS applies it as torch's offload_wrapper around the FSDP model (train_lib.py:626-629), after its
        # own activation checkpointing of the wrapped layers (train_lib.py:623-624); train.py checkpoints
        # through transformers before wrapping, and the wrapper's names would leave Hugging Face's.
        return (
            "Argument --mp-parameters: sm_activation_offloading must be false: train.py does not wrap the "
            "model in torch's offload_wrapper as AWS's SMP example does (docs/training.md)."
        )
    if args.smp_implementation:
        # AWS saves SMP's names as they are (checkpoints.py:189-210, _save_full) and loads pretrained weights
        # through transform(load_state_dict_from_rank0=True) (train_lib.py:529-534); neither is public.
        return (
            "Argument --smp-implementation: must be false: tsm.transform swaps transformers' modules for "
            "SMP's, whose parameter names are not Hugging Face's, and train.py cannot map them back for the "
            "final model.safetensors or from --init-from."
        )
    return None


@torch.no_grad()
def load_pretrained_fsdp1(model: torch.nn.Module, stored: dict, names_of: dict, read_chunk) -> None:
    """Weights into the FSDP1 `model`, one FSDP unit (a decoder layer, or the root's embeddings, norm and
    head) at a time: `summon_full_params(unit, recurse=False)` gathers the unit's full parameters on every
    rank, rank 0 reads that unit's stored tensors (`read_chunk`) and broadcasts each, every rank copies it
    in, and FSDP writes each rank's shard back as the context ends (torch 2.5.1
    fully_sharded_data_parallel.py `summon_full_params`, writeback=True). A rank's peak is its shards plus
    one unit twice (gathered, received), never the model: torch 2.5.1's set_model_state_dict with a full
    state dict allocates every full tensor on the device first (_state_dict_utils.py _broadcast_state_dict).
    `stored` and `read_chunk` are rank 0's; `names_of` maps a stored name to the model's names."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    units = {
        name: module for name, module in model.named_modules() if isinstance(module, FullyShardedDataParallel)
    }
    stored_name = stored_names(names_of, stored)  # rank 0's; the other ranks read nothing

    def read(names: list[str]) -> dict:
        return (
            read_chunk(sorted({stored_name[clean_name(name)] for name in names}))
            if dist.get_rank() == 0
            else {}
        )

    owned: dict[str, list[str]] = {unit: [] for unit in units}
    for name, _ in model.named_parameters():
        owner = max((unit for unit in units if not unit or name.startswith(unit + ".")), key=len)
        owned[owner].append(name)
    for unit_name, unit in units.items():
        with FullyShardedDataParallel.summon_full_params(unit, recurse=False, writeback=True):
            weights = read(owned[unit_name])
            for name in owned[unit_name]:
                _receive(model.get_parameter(name), weights.get(clean_name(name)))
            del weights
    for name, buffer in model.named_buffers():  # persistent buffers: FSDP1 does not shard them
        if clean_name(name) in names_of:  # the same buffers on every rank: each one is broadcast
            _receive(buffer, read([name]).get(clean_name(name)))


def stored_names(names_of: dict[str, list[str]], stored) -> dict[str, str]:
    """For each of the model's tensor names, the name under which the files in `stored` hold its values.
    save_pretrained writes a tied tensor once (Llama: model.embed_tokens.weight, not lm_head.weight), so
    only a name the files hold may be chosen: `names_of` lists both names of a tied pair under each, in an
    order that comes from a set of strings and so from PYTHONHASHSEED."""
    return {model_name: name for name, names in names_of.items() if name in stored for model_name in names}


def _receive(target: torch.Tensor, value: torch.Tensor | None) -> None:
    """Rank 0's `value` (None elsewhere) into `target` on every rank, in the target's dtype."""
    received = value.to(target.device, target.dtype) if value is not None else torch.empty_like(target)
    dist.broadcast(received, src=0)
    target.copy_(received.view_as(target))
