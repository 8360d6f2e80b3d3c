"""The instance catalog: the facts profiles are validated against."""

from __future__ import annotations

import pytest

from tests.domain.sagemaker_model import SERVICE_MODEL
from trainstack.instances import INSTANCE_TYPES, UnknownInstanceTypeError, instance_type

REQUIRED = (
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5.48xlarge",
    "ml.p5e.48xlarge",
    "ml.p5en.48xlarge",
    "ml.p3.16xlarge",
    "ml.p3dn.24xlarge",
    "ml.g5.12xlarge",
    "ml.g5.48xlarge",
    "ml.g6e.48xlarge",
)


def test_catalog_holds_every_required_type():
    assert set(REQUIRED) <= set(INSTANCE_TYPES)


def test_every_catalog_type_is_a_sagemaker_training_instance_type():
    training_types = set(SERVICE_MODEL.shape_for("TrainingInstanceType").enum)
    assert set(INSTANCE_TYPES) <= training_types


@pytest.mark.parametrize(
    ("name", "gpus", "model", "memory_mib"),
    [
        ("ml.p4d.24xlarge", 8, "A100", 40960),
        ("ml.p4de.24xlarge", 8, "A100", 81920),
        ("ml.p5.48xlarge", 8, "H100", 81559),  # 79.6 GiB, not 80
        ("ml.p5e.48xlarge", 8, "H200", 143771),
        ("ml.p5en.48xlarge", 8, "H200", 143771),
        ("ml.p3.16xlarge", 8, "V100", 16160),
        ("ml.p3dn.24xlarge", 8, "V100", 32768),
        ("ml.g5.12xlarge", 4, "A10G", 23028),  # 22.5 GiB, not 24
        ("ml.g5.48xlarge", 8, "A10G", 23028),
        ("ml.g6e.48xlarge", 8, "L40S", 46068),
        ("ml.m5.xlarge", 0, None, 0),
    ],
)
def test_gpu_facts_are_what_nvidia_smi_reports(name, gpus, model, memory_mib):
    spec = instance_type(name)
    assert (spec.gpus, spec.gpu_model, spec.gpu_memory_mib) == (gpus, model, memory_mib)
    assert spec.gpu_memory_bytes == memory_mib * 2**20


def test_smddp_is_aws_list_and_trains_only_where_the_gpu_has_bf16():
    assert {name for name, spec in INSTANCE_TYPES.items() if spec.smddp} == {
        "ml.p3dn.24xlarge",
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
    }
    assert {name for name, spec in INSTANCE_TYPES.items() if spec.smddp_for_training} == {
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
    }


def test_efa_on_p4_p5_and_not_on_p3_16xlarge_or_cpu_types():
    for name in (
        "ml.p3dn.24xlarge",
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
        "ml.p5en.48xlarge",
    ):
        assert instance_type(name).efa, name
    for name in ("ml.p3.16xlarge", "ml.m5.xlarge"):
        assert not instance_type(name).efa, name


def test_unknown_type_is_one_sentence_listing_the_known_ones():
    with pytest.raises(UnknownInstanceTypeError) as raised:
        instance_type("ml.p9.48xlarge")
    message = str(raised.value)
    assert message.startswith("unknown instance type 'ml.p9.48xlarge'; known types: ")
    assert all(name in message for name in INSTANCE_TYPES)
    assert "\n" not in message
