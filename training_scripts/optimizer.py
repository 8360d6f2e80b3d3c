"""AdamW parameter groups by module type and name, as AWS's SMP v2 example builds them.

AWS (amazon-sagemaker-examples @7378156, training/distributed_training/pytorch/model_parallel_v2/
shared-scripts/train_utils.py:91-119, `get_param_groups_by_weight_decay`): the parameters of LayerNorm
and LlamaRMSNorm modules and every parameter named `bias` get no weight decay; every other parameter
(Linear and Embedding weights) does. A rule on `p.dim()` cannot be used after wrapping: FSDP1 (what SMP
wraps) turns every parameter into a flattened 1-D view of its shard (torch 2.5.1
torch/distributed/fsdp/_flat_param.py, FlatParamHandle._use_sharded_views), so no parameter looks like
a matrix and the decay group would be empty.

The rule is applied to the unwrapped model before wrapping, by name; the wrapped model's parameters are
then matched by their name with the wrappers' prefixes removed. Names survive every wrapper train.py
uses (DDP's `module.`, FSDP1's `_fsdp_wrapped_module.` with use_orig_params, activation checkpointing's
`_checkpoint_wrapped_module.`, compile's `_orig_mod.`; FSDP2 wraps in place), where parameter objects
do not (meta-device parameters are replaced when they are materialized).
"""

import torch

# What wrappers insert into parameter names (torch 2.5.1: fsdp/_common_utils.py FSDP_WRAPPED_MODULE,
# algorithms/_checkpoint/checkpoint_wrapper.py _CHECKPOINT_WRAPPED_MODULE, _dynamo's OptimizedModule);
# DDP's `module.` only leads the name.
_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_DDP_PREFIX = "module."


def no_decay_names(model: torch.nn.Module) -> set[str]:
    """Names of the parameters AWS's rule exempts from weight decay: norm weights and biases."""
    names = set()
    for module_name, module in model.named_modules():
        is_norm = isinstance(module, torch.nn.LayerNorm) or type(module).__name__.endswith("RMSNorm")
        for name, parameter in module.named_parameters(recurse=False):
            if parameter is not None and (is_norm or name == "bias"):
                names.add(f"{module_name}.{name}" if module_name else name)
    return names


def clean_name(name: str) -> str:
    """A wrapped model's parameter name as the unwrapped model has it."""
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name.removeprefix(_DDP_PREFIX)


def parameter_groups(model: torch.nn.Module, no_decay: set[str], weight_decay: float) -> list[dict]:
    """AdamW's two groups for the (possibly wrapped) `model`: `no_decay` names (from `no_decay_names` of
    the unwrapped model) at weight decay 0, the rest at `weight_decay`."""
    exempt = {True: [], False: []}
    for name, parameter in model.named_parameters():
        exempt[clean_name(name) in no_decay].append(parameter)
    return [
        {"params": exempt[False], "weight_decay": weight_decay},
        {"params": exempt[True], "weight_decay": 0.0},
    ]
