"""Stand-in for `torch.sagemaker.delayed_param` (see __init__.py for what is documented and what assumed)."""

from __future__ import annotations

import contextlib

import torch
from torch.sagemaker import _calls


class DelayedParamIniter:
    """SMP's delayed parameter initialization: FSDP1 calls `get_param_init_fn()` on each module whose
    tensors are still on the meta device. AWS's example creates it after tsm.transform and before FSDP
    (amazon-sagemaker-examples @7378156 model_parallel_v2/shared-scripts/train_lib.py:536-542, 590-605).
    Assumed (SMP's code is not public): without `init_method_using_config` a module is allocated with
    to_empty and reset with its own reset_parameters(); the post-init hook does nothing here."""

    def __init__(self, model: torch.nn.Module, init_method_using_config=None, verbose: bool = False):
        _calls.record("DelayedParamIniter", custom_init=init_method_using_config is not None)
        _calls.require_before("DelayedParamIniter", "fsdp_wrap")
        self.model, self.init_method = model, init_method_using_config
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None

    def get_param_init_fn(self):
        def init(module: torch.nn.Module) -> None:
            if self.init_method is not None:
                self.init_method(module)
                return
            module.to_empty(device=self.device or torch.device("cpu"), recurse=False)
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

        return init

    def get_post_param_init_fn(self):
        return lambda module: None

    @contextlib.contextmanager
    def validate_params_and_buffers_inited(self):
        yield
        # named tensors, not state_dict(): FSDP's state-dict hooks would lazily initialize a nested unit
        # as if it were the root
        tensors = [*self.model.named_parameters(), *self.model.named_buffers()]
        left = [name for name, tensor in tensors if tensor.is_meta]
        if left:
            raise RuntimeError(f"torch.sagemaker stand-in: tensors left on the meta device: {left[:3]}")
