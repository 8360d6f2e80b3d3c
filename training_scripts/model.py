"""Llama-family causal LM from a preset or a local directory, built on the meta device; nothing is downloaded.

Large models never exist whole on one rank: `build_model` makes parameters without
storage, the caller shards them (FSDP2 or SMP), and `initialize` materializes each
rank's shards and fills them. Initial values do not depend on the sharding: each
module's parameters are drawn whole (one module at a time, on the training device,
from a generator seeded by --seed and the module's name: `initial_values`), and each
rank keeps its slice. So DDP, FSDP2, SMP's FSDP1 and any world size start from the
same weights, and peak memory is a rank's shards plus the largest module.
"""

import hashlib
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from data import UserError
from model_shapes import PRESETS
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, PretrainedConfig

try:  # DTensor: public from PyTorch 2.5's successor; private in 2.5 (the SMP 2.8 image).
    from torch.distributed.tensor import DTensor, distribute_tensor
except ImportError:
    from torch.distributed._tensor import DTensor, distribute_tensor

log = logging.getLogger(__name__)


def model_config(
    preset: str, init_from: str | None, vocab_size: int | None, seq_len: int
) -> PretrainedConfig:
    """The config of `init_from` or of `preset` (with `vocab_size`), positions raised to `seq_len`."""
    if init_from:
        config = AutoConfig.from_pretrained(init_from, local_files_only=True)
    else:
        shape = dict(PRESETS[preset])
        if vocab_size:
            shape["vocab_size"] = vocab_size
        config = LlamaConfig(
            **shape,
            tie_word_embeddings=False,
            rms_norm_eps=1e-5,
            use_cache=False,
            architectures=["LlamaForCausalLM"],  # so the saved config.json names its class
        )
    if seq_len > config.max_position_embeddings:
        # Rotary positions extend to any length; the exported config must say what the model was trained on.
        log.warning(
            "--seq-len %d exceeds the model's max_position_embeddings %d: raised to %d (the exported "
            "config.json says so).",
            seq_len,
            config.max_position_embeddings,
            seq_len,
        )
        config.max_position_embeddings = seq_len
    return config


def build_model(config: PretrainedConfig) -> torch.nn.Module:
    """The model with every parameter and buffer on the meta device (no storage): shard, then `initialize`.

    fp32 master weights whatever dtype the config names: transformers 5 builds in the config's dtype, so an
    --init-from of a bf16 export would otherwise train in bf16 (4.44.2 ignores it)."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config).float()


def has_weights(init_from: str | None) -> bool:
    return bool(init_from) and any(
        any(Path(init_from).glob(pattern)) for pattern in ("*.safetensors", "*.bin")
    )


def identity(model: torch.nn.Module) -> dict:
    """What a checkpoint records of the model it belongs to: class, size and a fingerprint of every
    parameter's name and shape (another preset, vocabulary or architecture gives another fingerprint)."""
    shapes = sorted((name, tuple(p.shape)) for name, p in model.named_parameters())
    return {
        "class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "fingerprint": hashlib.sha256(repr(shapes).encode()).hexdigest()[:16],
    }


def describe(identity_: dict) -> str:
    parameters = f"{identity_['parameters']:,} parameters"
    return f"{identity_['class']} with {parameters} (fingerprint {identity_['fingerprint']})"


@torch.no_grad()
def initialize(
    model: torch.nn.Module, hf_model: torch.nn.Module, device: torch.device, seed: int, allocate: bool
) -> None:
    """Fill the (possibly sharded) `model` with its initial weights; `allocate` first materializes it
    from the meta device on `device`.

    `hf_model` is the transformers model inside it (FSDP2 shards in place, so often the same object).
    Every rank draws the same full values module by module (each from `module_seed(seed, its name)`) and
    keeps its own shard.
    """
    if allocate:
        model.to_empty(device=device)
        hf_model.tie_weights()  # to_empty gives each module its own tensor: tied ones share one again
    for name, module in hf_model.named_modules():
        _fill(module, initial_values(module, hf_model.config, device, _generator(seed, name, device)))


def delayed_initializer(
    hf_model: torch.nn.Module, device: torch.device, seed: int
) -> Callable[[torch.nn.Module], None]:
    """The per-module initialization SMP's delayed parameter initialization calls (its
    `init_method_using_config`): FSDP1 passes each module whose own tensors are still on the meta device,
    in its own order; each module's values come from its name (as `initialize` draws them), so SMP starts
    from the weights DDP and FSDP2 start from. Names are taken now, before any wrapper renames modules."""
    names = {id(module): name for name, module in hf_model.named_modules()}
    config = hf_model.config
    order = {key: index for index, key in enumerate(names)}
    tied_groups = _tied_parameter_holders(hf_model)

    @torch.no_grad()
    def initialize_module(module: torch.nn.Module) -> None:
        # to_empty gives a module new tensors: a tied parameter (lm_head.weight = embed_tokens.weight) must
        # go to every module that holds it before FSDP1 flattens them, or FSDP would train two copies (and
        # SMP's post_param_init_fn, which may re-tie, is not published). So the modules sharing a parameter
        # with this one are materialized with it, given its tensor, and filled in model order, as
        # `initialize` fills them after tie_weights.
        groups = [group for group in tied_groups if any(holder is module for holder, _ in group)]
        related = list(
            {id(m): m for m in [module, *(holder for group in groups for holder, _ in group)]}.values()
        )
        for each in related:
            if any(t.is_meta for t in [*each.parameters(recurse=False), *each.buffers(recurse=False)]):
                each.to_empty(device=device, recurse=False)
        for group in groups:
            shared = next(getattr(holder, attribute) for holder, attribute in group if holder is module)
            for holder, attribute in group:
                setattr(holder, attribute, shared)
        for each in sorted(related, key=lambda m: order[id(m)]):
            _fill(each, initial_values(each, config, device, _generator(seed, names[id(each)], device)))

    return initialize_module


def _tied_parameter_holders(hf_model: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str]]]:
    """Each parameter several modules hold (tied weights), as the (module, attribute) pairs holding it."""
    holders: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in hf_model.modules():
        for attribute, parameter in module.named_parameters(recurse=False):
            holders.setdefault(id(parameter), []).append((module, attribute))
    return [group for group in holders.values() if len(group) > 1]


def module_seed(seed: int, name: str) -> int:
    """The seed of one module's initial values: --seed and the module's name, so the values do not depend
    on the order in which a wrapper initializes modules (FSDP1 materializes them unit by unit)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") >> 1


def _generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(module_seed(seed, name))


def initial_values(
    module: torch.nn.Module, config: PretrainedConfig, device: torch.device, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Full-size initial values of `module`'s own parameters and buffers, random ones drawn from
    `generator`. Set here, not by transformers' `_init_weights`: 4.44.2's (the image's) initializes only
    Linear and Embedding and leaves RMSNorm weights as whatever memory held."""
    own = {**dict(module.named_parameters(recurse=False)), **dict(module.named_buffers(recurse=False))}
    if not own:
        return {}
    std = config.initializer_range

    def normal(name: str) -> torch.Tensor:
        empty = torch.empty(own[name].shape, dtype=own[name].dtype, device=device)
        return empty.normal_(0.0, std, generator=generator)

    def constant(name: str, value: float) -> torch.Tensor:
        return torch.full(own[name].shape, value, dtype=own[name].dtype, device=device)

    kind = type(module).__name__
    if isinstance(module, torch.nn.Linear):
        values = {"weight": normal("weight")}
    elif isinstance(module, torch.nn.Embedding):
        values = {"weight": normal("weight")}
        if module.padding_idx is not None:
            values["weight"][module.padding_idx] = 0
    elif isinstance(module, torch.nn.LayerNorm) or kind.endswith("RMSNorm"):
        values = {"weight": constant("weight", 1.0)}
    elif kind.endswith("RotaryEmbedding"):  # frequencies computed from the config, as transformers does
        fresh = type(module)(config=getattr(module, "config", config))
        values = {name: buffer.to(device) for name, buffer in fresh.named_buffers(recurse=False)}
    else:
        values = {}
    if "bias" in own and own["bias"] is not None:
        values["bias"] = constant("bias", 0.0)
    unset = sorted(own.keys() - values.keys())
    if unset:
        raise UserError(
            f"The model has {kind} layers ({', '.join(unset)}), which train.py cannot initialize: "
            "--init-from must name a Llama-family model (Linear, Embedding, RMSNorm and rotary layers)."
        )
    return values


def _fill(module: torch.nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Copy full-size `values` into `module`'s tensors: this rank's shard of an FSDP2 parameter."""
    for name, value in values.items():
        target = getattr(module, name)
        if isinstance(target, DTensor):
            target.to_local().copy_(_shard_of(value, target).to_local())
        else:
            target.copy_(value)


def _shard_of(full: torch.Tensor, parameter: DTensor) -> DTensor:
    """This rank's part of `full`, cut as `parameter` is; every rank holds the same `full`, so no
    rank needs to send it (src_data_rank=None; PyTorch 2.5 lacks the option and scatters from rank 0)."""
    try:
        return distribute_tensor(full, parameter.device_mesh, parameter.placements, src_data_rank=None)
    except TypeError:
        return distribute_tensor(full, parameter.device_mesh, parameter.placements)


# Tensors rank 0 reads and every rank receives at a time: --init-from adds about this to a rank's peak.
LOAD_CHUNK_BYTES = 256 * 2**20

# What FSDP1 (SMP) inserts into the names of the modules it wraps.
_WRAPPER_PREFIX = "_fsdp_wrapped_module."


def load_pretrained(
    model: torch.nn.Module,
    hf_model: torch.nn.Module,
    init_from: str,
    control_device: torch.device,
) -> None:
    """Weights of `init_from` into the materialized (possibly sharded) `model`, whose transformers model is
    `hf_model`. Rank 0 alone reads the files, in their own dtype, LOAD_CHUNK_BYTES of tensors at a time, and
    broadcasts each chunk (set_model_state_dict with broadcast_from_rank0 sends the chunk's names and
    shapes, then its tensors): every rank holds its part of the model plus one chunk, never a second model.
    FSDP1 (SMP) loads one FSDP unit at a time instead (smp.load_pretrained_fsdp1). `control_device`: where
    the default group takes the small agreement (Runtime.control_device: the GPU under smddp)."""
    from smp import load_pretrained_fsdp1
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.nn.parallel import DistributedDataParallel

    chunks, problem, stored = [], None, {}
    names_of = _names_of_stored(hf_model)
    if dist.get_rank() == 0:
        stored = _stored_tensors(Path(init_from))
        loadable = {name for stored_name in stored for name in names_of.get(stored_name, [])}
        missing = sorted(_saved_names(hf_model) - loadable)
        if missing:
            problem = (
                f"--init-from {init_from} has no weights for {len(missing)} of the model's tensors "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): its files must be those "
                "transformers' save_pretrained writes for the class in its config.json."
            )
        chunks = _chunks(stored, names_of, LOAD_CHUNK_BYTES)
    agreed = [problem, len(chunks)]
    dist.broadcast_object_list(agreed, src=0, group=dist.group.WORLD, device=control_device)
    problem, chunk_count = agreed
    if problem:
        raise UserError(problem)
    if isinstance(model, FullyShardedDataParallel):
        # A partial full state dict would have FSDP1 load the model's other tensors, as sharded, as full ones.
        load_pretrained_fsdp1(model, stored, names_of, lambda names: _read_chunk(names, stored, names_of))
        return
    # torch 2.5.1 looks every key of the model up under DDP's "module." prefix in rank 0's dict, so a
    # partial dict loads into the module DDP wraps (the same tensors).
    target = model.module if isinstance(model, DistributedDataParallel) else model
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
    for index in range(chunk_count):
        weights = _read_chunk(chunks[index], stored, names_of) if dist.get_rank() == 0 else {}
        set_model_state_dict(target, weights, options=options)
        del weights  # before the next chunk is read


def _stored_tensors(directory: Path) -> dict[str, tuple[Path, int]]:
    """The file and size in bytes of every tensor in the directory's safetensors files (else its PyTorch
    .bin files), from the files' headers (.bin: memory-mapped, not read)."""
    from safetensors import safe_open

    stored = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(path, framework="pt") as file:
            for name in file.keys():
                tensor = file.get_slice(name)
                stored[name] = (path, math.prod(tensor.get_shape()) * _element_bytes(tensor.get_dtype()))
    if stored:
        return stored
    for path in sorted(directory.glob("*.bin")):
        for name, tensor in _mapped_bin(path).items():
            stored[name] = (path, tensor.numel() * tensor.element_size())
    return stored


def _element_bytes(safetensors_dtype: str) -> int:
    """safetensors names dtypes by their width in bits (F32, BF16, F8_E4M3, I8); BOOL takes a byte."""
    width = re.search(r"\d+", safetensors_dtype)
    return int(width.group()) // 8 if width else 1


def _mapped_bin(path: Path) -> dict[str, torch.Tensor]:
    """A PyTorch .bin file's tensors, memory-mapped: only what is used is read."""
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def _chunks(
    stored: dict[str, tuple[Path, int]], names_of: dict[str, list[str]], limit: int | None
) -> list[list[str]]:
    """The stored tensors the model uses, in file order, in chunks of at most `limit` bytes (a larger tensor
    alone; None: one chunk). A tied tensor counts once per name: each name is broadcast."""
    chunks, size, covered = [[]], 0, set()
    for name, (_, nbytes) in stored.items():
        if name not in names_of or name in covered:  # not the model's, or saved under each tied name
            continue
        covered.update(names_of[name])
        nbytes *= len(names_of[name])
        if limit is not None and chunks[-1] and size + nbytes > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(name)
        size += nbytes
    return chunks if chunks[-1] else []


def _read_chunk(
    names: list[str], stored: dict[str, tuple[Path, int]], names_of: dict[str, list[str]]
) -> dict[str, torch.Tensor]:
    """The stored tensors `names`, each under every name the model has for it. Each file is opened for
    this chunk alone, so its mapped pages leave rank 0's memory with the chunk."""
    from safetensors import safe_open

    weights = {}
    for path in dict.fromkeys(stored[name][0] for name in names):
        in_file = [name for name in names if stored[name][0] == path]
        if path.suffix == ".safetensors":
            with safe_open(path, framework="pt") as file:
                tensors = {name: file.get_tensor(name) for name in in_file}
        else:
            mapped = _mapped_bin(path)
            tensors = {name: mapped[name] for name in in_file}
        for name, tensor in tensors.items():
            weights.update(dict.fromkeys(names_of[name], tensor))
    return weights


def _saved_names(hf_model: torch.nn.Module) -> set[str]:
    """The names of the model's state-dict tensors: every parameter (tied ones under each name) and
    persistent buffer, as save_pretrained writes them."""
    names = {name for name, _ in hf_model.named_parameters(remove_duplicate=False)}
    for module_name, module in hf_model.named_modules():
        for name, _ in module.named_buffers(recurse=False):
            if name not in module._non_persistent_buffers_set:
                names.add(f"{module_name}.{name}" if module_name else name)
    return {name.replace(_WRAPPER_PREFIX, "") for name in names}


def _names_of_stored(hf_model: torch.nn.Module) -> dict[str, list[str]]:
    """For each name a saved tensor may have, the model's names for that tensor: save_pretrained writes a
    tied one (lm_head.weight = embed_tokens.weight) once, under either name."""
    names_of = {name: [name] for name in _saved_names(hf_model)}
    for names in tied_names(hf_model):
        names_of.update(dict.fromkeys(names, names))
    return names_of


def tied_names(model: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter the model holds under several names (tied weights), without the
    prefixes FSDP1 inserts."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name.replace(_WRAPPER_PREFIX, ""))
    return [group for group in names.values() if len(group) > 1]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks: the unit for FSDP sharding, compile and checkpointing."""
    return list(model.model.layers)
