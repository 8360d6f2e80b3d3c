"""CPU stand-in for SMP v2's `torch.sagemaker` (test-only; made importable by ../sitecustomize.py).

The real package exists only in AWS's SMP images (not on PyPI). This stand-in lets train.py's SMP path run
on CPU under torchrun/gloo, records the order of the calls that matter (tsm.init, transform, the delayed
parameter initializer, FSDP wrapping, optimizer creation: _calls.py), and enforces what AWS documents:

1. tsm.init() comes first: AWS, "Use the SageMaker model parallelism library v2" (model-parallel-use-api-v2),
   step 1 imports torch.sagemaker and calls torch.sagemaker.init() at the top of the script.
2. The config keys are those of AWS's "SMP v2 core feature configuration parameters" (distributed-model-
   parallel-v2-reference: "a complete list": hybrid_shard_degree, sm_activation_offloading,
   activation_loading_horizon, fsdp_cache_flush_warnings, allow_empty_shards, tensor_parallel_degree,
   context_parallel_degree, expert_parallel_degree, random_seed); hybrid_shard_degree is "an integer
   between 0 and world_size" (same page).
3. transform and DelayedParamIniter come after init and before FSDP wraps the model; the optimizer after
   FSDP: AWS's example (amazon-sagemaker-examples @7378156, model_parallel_v2/shared-scripts/train_lib.py:
   426, 516-542, 590-607, 635-639) and torch 2.5.1 fully_sharded_data_parallel.py:152-154 ("wrapping
   your module and then initializing your optimizer after").
4. transform changes the model's state-dict names away from Hugging Face's (AWS's SMP v2 docs, as the
   issue quotes them; AWS's example calls transform only with use_smp_implementation, train_lib.py:516).

Assumed (SMP's code is not public), and marked so where used:
- tensor_parallel_degree must divide the world size (and > 1 needs transform, as train_lib.py:428-429
  switches use_smp_implementation on);
- how transform renames: here each decoder layer is wrapped in a module of SMP's (`_SMPTransformerLayer`,
  the original under `.layer`), so names gain `.layer.`; the real one replaces the modules;
- `state` carries the config as attributes (train_lib.py:428 and 626 read tsm.state.tensor_parallel_degree
  and tsm.state.sm_activation_offloading);
- the real package runs on CUDA only; this one serves CPU (`SERVED_DEVICE_TYPES`);
- FSDP's `post_param_init_fn` (passed by AWS's example, absent from torch 2.5.1 on PyPI) comes with the SMP
  image's torch build: the stand-in accepts it and records that it was passed.
"""

from __future__ import annotations

import json
import os
import types

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.sagemaker import _calls

SERVED_DEVICE_TYPES = ("cpu", "cuda")
DOCUMENTED_KEYS = {
    "hybrid_shard_degree",
    "sm_activation_offloading",
    "activation_loading_horizon",
    "fsdp_cache_flush_warnings",
    "allow_empty_shards",
    "tensor_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
    "random_seed",
}
state = types.SimpleNamespace(tensor_parallel_degree=1, sm_activation_offloading=False)


def init(config: dict | None = None) -> None:
    if config is None:  # as on SageMaker: the job's mp_parameters
        config = json.loads(os.environ.get("SM_HP_MP_PARAMETERS") or "{}")
    unknown = sorted(set(config) - DOCUMENTED_KEYS)
    if unknown:
        raise ValueError(f"torch.sagemaker stand-in: unknown SMP v2 config keys {unknown} (rule 2).")
    world_size = dist.get_world_size()
    hybrid = int(config.get("hybrid_shard_degree", 0))
    if not 0 <= hybrid <= world_size:
        raise ValueError(
            f"torch.sagemaker stand-in: hybrid_shard_degree {hybrid} not in 0..{world_size} (rule 2)."
        )
    tensor_parallel = int(config.get("tensor_parallel_degree", 1))
    if world_size % tensor_parallel:  # assumed
        raise ValueError(
            f"torch.sagemaker stand-in: tensor_parallel_degree {tensor_parallel} must divide {world_size}."
        )
    state.tensor_parallel_degree = tensor_parallel
    state.sm_activation_offloading = bool(config.get("sm_activation_offloading", False))
    state.random_seed = config.get("random_seed")
    _calls.record("init", config=config)


class _SMPTransformerLayer(torch.nn.Module):
    """Assumed stand-in for SMP's own decoder block: the transformers layer under another name."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        return self.layer(*args, **kwargs)


def transform(model: torch.nn.Module, config=None, load_state_dict_from_rank0: bool = False, **kwargs):
    _calls.record("transform", load_state_dict_from_rank0=load_state_dict_from_rank0)
    _calls.require_before("transform", "fsdp_wrap")  # rules 1 and 3
    if isinstance(model, FullyShardedDataParallel):
        raise RuntimeError(f"torch.sagemaker stand-in: transform of an FSDP-wrapped model ({_calls.ORDER}).")
    layers = model.model.layers
    for index, layer in enumerate(layers):
        layers[index] = _SMPTransformerLayer(layer)
    return model


def _recording_fsdp_init(original):
    depth = {"value": 0}  # auto-wrapping constructs the nested units inside the root's constructor

    def __init__(self, module, *args, **kwargs):
        # AWS's example passes post_param_init_fn (train_lib.py:603-605), which torch 2.5.1 from PyPI lacks:
        # assumed to come with the SMP image's own torch build; the stand-in records it and drops it.
        post_param_init_fn = kwargs.pop("post_param_init_fn", None)
        outermost = depth["value"] == 0
        if outermost and _calls.called("init"):
            policy = kwargs.get("mixed_precision")
            _calls.record(
                "fsdp_wrap",
                mixed_precision=None
                if policy is None
                else {
                    field: str(getattr(policy, field))
                    for field in ("param_dtype", "reduce_dtype", "buffer_dtype")
                },
                sharding_strategy=str(kwargs.get("sharding_strategy")),
                use_orig_params=kwargs.get("use_orig_params", False),
                sync_module_states=kwargs.get("sync_module_states", False),
                param_init_fn=kwargs.get("param_init_fn") is not None,
                post_param_init_fn=post_param_init_fn is not None,
            )
            if _calls.called("optimizer"):
                raise RuntimeError(
                    f"torch.sagemaker stand-in: FSDP wrapping after the optimizer ({_calls.ORDER})."
                )
            if state.tensor_parallel_degree > 1 and not _calls.called(
                "transform"
            ):  # assumed, from train_lib.py:428
                raise RuntimeError(
                    "torch.sagemaker stand-in: tensor_parallel_degree > 1 needs transform before FSDP."
                )
        depth["value"] += 1
        try:
            original(self, module, *args, **kwargs)
        finally:
            depth["value"] -= 1

    return __init__


def _recording_optimizer_init(original):
    def __init__(self, params, defaults, *args, **kwargs):
        original(self, params, defaults, *args, **kwargs)
        groups = [
            {
                **{key: value for key, value in group.items() if key != "params"},
                "tensors": len(group["params"]),
                "local_elements": sum(p.numel() for p in group["params"]),
            }
            for group in self.param_groups
        ]
        _calls.record("optimizer", type=type(self).__name__, groups=groups)
        if _calls.called("init") and not _calls.called("fsdp_wrap"):  # recorded under DDP too, for comparison
            raise RuntimeError(
                f"torch.sagemaker stand-in: optimizer created before FSDP wrapping ({_calls.ORDER})."
            )

    return __init__


FullyShardedDataParallel.__init__ = _recording_fsdp_init(FullyShardedDataParallel.__init__)
torch.optim.Optimizer.__init__ = _recording_optimizer_init(torch.optim.Optimizer.__init__)
