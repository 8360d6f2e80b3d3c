"""SageMaker training instance types trainstack knows: GPUs, GPU memory, bf16, EFA and SMDDP support.

Each fact is written once, here. Sources:
- GPUs, GPU model and vCPUs: EC2 instance type specifications,
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html (accelerated computing) and
  https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html (general purpose).
- GPU memory: the total that `nvidia-smi` reports (MiB), which is what a job can address, not the
  marketing figure (A10G "24 GB" is 23028 MiB = 22.5 GiB). Read from nvidia-smi outputs published in
  public repositories (code search, 2026-12-01): "NVIDIA A10G ... / 23028MiB", "NVIDIA A100-SXM4-40GB
  ... / 40960MiB", "NVIDIA A100-SXM4-80GB ... / 81920MiB", "NVIDIA H100 80GB HBM3 ... / 81559MiB",
  "NVIDIA H200 ... / 143771MiB", "NVIDIA L40S ... / 46068MiB", "Tesla V100-SXM2-32GB ... / 32768MiB",
  "Tesla V100-SXM2... / 16160MiB". p5e and p5en carry the same H200 SXM part (assumed: one reading).
- bf16: NVIDIA compute capability 8.0 and later (Ampere, Ada, Hopper); V100 (7.0) has none, so
  train.py's bf16 compute cannot run there.
- EFA: "Supported instance types" in the EC2 EFA guide,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types
- SMDDP: AWS's "Supported frameworks, AWS Regions, and instances types",
  https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-data-parallel-support.html, lists
  ml.p3dn.24xlarge (marked: optimization discontinued on P3, AllReduce only), ml.p4d.24xlarge and
  ml.p4de.24xlarge; SMP v2's guide says "The SMDDP library supports P4 and P4de instances".
  `smddp_for_training` is what trainstack allows: AWS's list where the GPU has bf16 (p4d, p4de).
- Instance store (local NVMe SSDs): the "Instance store" column of the same EC2 specification pages.
  SageMaker refuses a ResourceConfig.VolumeKmsKeyId on such types and encrypts their local volumes with
  the instance's hardware module instead (botocore's sagemaker model, ResourceConfig.VolumeKmsKeyId).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2


class UnknownInstanceTypeError(ValueError):
    """An instance type that is not in the catalog; str() is one sentence listing the known ones."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str | None
    gpu_memory_mib: int  # per GPU, as nvidia-smi reports its total
    vcpus: int
    bf16: bool
    efa: bool
    smddp: bool  # on AWS's SMDDP list
    instance_store: bool = True  # local NVMe SSDs: every GPU type here has them, p3.16xlarge excepted

    @property
    def gpu_memory_bytes(self) -> int:
        return self.gpu_memory_mib * MIB

    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu_memory_mib / 1024

    @property
    def smddp_for_training(self) -> bool:
        """SMDDP supports it and train.py can compute in bf16 on it."""
        return self.smddp and self.bf16


_CATALOG = (
    #            name                GPUs  GPU     MiB/GPU  vCPUs  bf16   EFA    SMDDP
    InstanceType("ml.p3.16xlarge", 8, "V100", 16160, 64, False, False, False, instance_store=False),
    InstanceType("ml.p3dn.24xlarge", 8, "V100", 32768, 96, False, True, True),
    InstanceType("ml.p4d.24xlarge", 8, "A100", 40960, 96, True, True, True),
    InstanceType("ml.p4de.24xlarge", 8, "A100", 81920, 96, True, True, True),
    InstanceType("ml.p5.48xlarge", 8, "H100", 81559, 192, True, True, False),
    InstanceType("ml.p5e.48xlarge", 8, "H200", 143771, 192, True, True, False),
    InstanceType("ml.p5en.48xlarge", 8, "H200", 143771, 192, True, True, False),
    InstanceType("ml.g5.12xlarge", 4, "A10G", 23028, 48, True, True, False),
    InstanceType("ml.g5.48xlarge", 8, "A10G", 23028, 192, True, True, False),
    InstanceType("ml.g6e.48xlarge", 8, "L40S", 46068, 192, True, True, False),
    # CPU types: cheap smoke tests of the pipeline itself.
    InstanceType("ml.m5.xlarge", 0, None, 0, 4, False, False, False, instance_store=False),
    InstanceType("ml.c5.4xlarge", 0, None, 0, 16, False, False, False, instance_store=False),
)

INSTANCE_TYPES: dict[str, InstanceType] = {instance.name: instance for instance in _CATALOG}


def instance_type(name: str) -> InstanceType:
    """The catalog entry for `name`; an unknown name raises UnknownInstanceTypeError."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise UnknownInstanceTypeError(
            f"unknown instance type '{name}'; known types: {', '.join(sorted(INSTANCE_TYPES))}"
        ) from None
