"""Run under torchrun: the bytes of live tensors that one non-final micro-batch of an accumulation leaves
behind on this rank (its gradients), as train.py accumulates them; printed as `gradient_bytes=<n>`.

    torchrun --nproc_per_node=2 gradient_memory.py {fsdp|ddp}

Counted: every distinct tensor storage reachable from Python (parameters, gradients, FSDP's buffers),
after the micro-batch against before it, so memory that FSDP holds between micro-batches counts too.
"""

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training_scripts"))

import torch  # noqa: E402
from distributed import gradient_sync, setup, teardown, wrap_model  # noqa: E402
from model import build_model, initialize, model_config  # noqa: E402


def live_tensor_bytes() -> int:
    gc.collect()
    tensors = [item for item in gc.get_objects() if isinstance(item, torch.Tensor)]
    # A gradient that autograd accumulated has no Python object until it is read: read them all,
    # FSDP's unsharded parameters' included.
    tensors += [
        item.grad for item in tensors if item.is_leaf and item.requires_grad and item.grad is not None
    ]
    storages = {}
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.device.type != "meta":
            storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    return sum(storages.values())


def main(parallelism: str) -> None:
    runtime = setup("torchrun", {})
    config = model_config("tiny", None, None, 32)
    hf_model = build_model(config)
    model = wrap_model(
        hf_model,
        runtime,
        parallelism,
        {},
        activation_checkpointing=False,
        compile_layers=False,
        materialize=lambda module: initialize(module, hf_model, runtime.device, 0, allocate=True),
        seed=0,
    )
    batch = torch.randint(0, config.vocab_size, (2, 33))
    before = live_tensor_bytes()
    for _ in range(2):  # two non-final micro-batches: what they leave must not grow either
        with gradient_sync(model, enabled=False):
            model(input_ids=batch[:, :-1], labels=batch[:, 1:]).loss.backward()
    print(f"gradient_bytes={live_tensor_bytes() - before}", flush=True)
    teardown()


if __name__ == "__main__":
    main(sys.argv[1])
