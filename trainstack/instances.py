"""SageMaker training instance types trainstack knows: GPUs, GPU memory, EFA and SMDDP support.

Each fact is written once, here. Sources (AWS documentation):
- GPUs, GPU model, GPU memory and vCPUs: EC2 instance type specifications,
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html (accelerated computing) and
  https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html (general purpose).
- EFA: "Supported instance types" in the EC2 EFA guide,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types
- SMDDP: only ml.p3dn.24xlarge, ml.p4d.24xlarge and ml.p4de.24xlarge,
  https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-data-parallel-support.html
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownInstanceTypeError(ValueError):
    """An instance type that is not in the catalog; str() is one sentence listing the known ones."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str | None
    gpu_memory_gib: int  # per GPU
    vcpus: int
    efa: bool
    smddp: bool

    @property
    def total_gpu_memory_gib(self) -> int:
        return self.gpus * self.gpu_memory_gib


_CATALOG = (
    #            name                GPUs  GPU     GiB/GPU  vCPUs  EFA    SMDDP
    InstanceType("ml.p3.16xlarge", 8, "V100", 16, 64, False, False),
    InstanceType("ml.p3dn.24xlarge", 8, "V100", 32, 96, True, True),
    InstanceType("ml.p4d.24xlarge", 8, "A100", 40, 96, True, True),
    InstanceType("ml.p4de.24xlarge", 8, "A100", 80, 96, True, True),
    InstanceType("ml.p5.48xlarge", 8, "H100", 80, 192, True, False),
    InstanceType("ml.p5e.48xlarge", 8, "H200", 141, 192, True, False),
    InstanceType("ml.p5en.48xlarge", 8, "H200", 141, 192, True, False),
    InstanceType("ml.g5.12xlarge", 4, "A10G", 24, 48, True, False),
    InstanceType("ml.g5.48xlarge", 8, "A10G", 24, 192, True, False),
    InstanceType("ml.g6e.48xlarge", 8, "L40S", 48, 192, True, False),
    # CPU types: cheap smoke tests of the pipeline itself.
    InstanceType("ml.m5.xlarge", 0, None, 0, 4, False, False),
    InstanceType("ml.c5.4xlarge", 0, None, 0, 16, False, False),
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
