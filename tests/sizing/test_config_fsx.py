"""FSx sizing at config load: Settings.fsx_plan, and an impossible need is a ConfigError naming the field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainstack.config_loading import ConfigError
from trainstack.fsx_sizing import plan_for


def test_default_config_plan(make_settings):
    settings = make_settings()
    plan = settings.fsx_plan
    assert (plan.deployment_type, plan.per_unit_storage_throughput, plan.storage_capacity_gib) == (
        "PERSISTENT_2",
        1000,
        1200,
    )
    assert plan.required_mbps == settings.fsx.throughput_mbps
    assert plan.dataset_gib == settings.dataset.size_gib
    assert plan_for(settings.dataset.size_gib, settings.fsx) == plan


def test_plan_follows_a_copied_settings(make_settings):
    settings = make_settings()
    scratch_fsx = settings.fsx.model_copy(update={"deployment_type": "SCRATCH_2"})
    scratch = settings.model_copy(update={"fsx": scratch_fsx})
    assert settings.fsx_plan.deployment_type == "PERSISTENT_2"
    assert scratch.fsx_plan.deployment_type == "SCRATCH_2"


def test_epoch_seconds_and_deployment_type_reach_the_plan(make_settings):
    settings = make_settings(
        {
            "dataset": {"size_gib": 100},
            "fsx": {"throughput_mbps": None, "epoch_seconds": 30, "deployment_type": "SCRATCH_2"},
        }
    )
    assert (settings.fsx_plan.deployment_type, settings.fsx_plan.storage_capacity_gib) == ("SCRATCH_2", 19200)


def test_disabled_fsx_has_no_plan(make_settings):
    settings = make_settings({"fsx": {"enabled": False, "throughput_mbps": None}})
    assert settings.fsx_plan is None and plan_for(settings.dataset.size_gib, settings.fsx) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"fsx": {"throughput_mbps": 5_000_000}},
            "test config: fsx.throughput_mbps: 5,000,000 MB/s is more than one file system of at most "
            "1,000,000 GiB can give (PERSISTENT_2 at 1000 MB/s/TiB reaches 975,000 MB/s at 998,400 GiB).",
        ),
        (
            {"fsx": {"throughput_mbps": 200_000, "deployment_type": "SCRATCH_2"}},
            "test config: fsx.throughput_mbps: 200,000 MB/s is more than one file system of at most "
            "1,000,000 GiB can give (SCRATCH_2 reaches 195,000 MB/s at 998,400 GiB).",
        ),
        (
            {"fsx": {"throughput_mbps": None, "epoch_seconds": 0.5}},
            "test config: fsx.epoch_seconds: reading 1,000 GiB every 0.5 s needs 2,147,484 MB/s, "
            "more than one file system of at most 1,000,000 GiB can give "
            "(PERSISTENT_2 at 1000 MB/s/TiB reaches 975,000 MB/s at 998,400 GiB); "
            "allow at least 1.11 s per epoch.",
        ),
        (
            {"dataset": {"size_gib": 999_000}},
            "test config: dataset.size_gib: 999,000 GiB does not fit one file system "
            "of at most 1,000,000 GiB (largest valid capacity 998,400 GiB).",
        ),
    ],
)
def test_impossible_fsx_need_is_a_config_error_naming_the_field(make_settings, overrides, message):
    with pytest.raises(ConfigError) as raised:
        make_settings(overrides)
    assert str(raised.value) == message


def test_oversized_dataset_is_fine_when_fsx_is_disabled(make_settings):
    make_settings({"dataset": {"size_gib": 999_000}, "fsx": {"enabled": False, "throughput_mbps": None}})


def test_config_and_sizing_import_without_cdk():
    code = (
        "import sys, trainstack.config_loading, trainstack.fsx_sizing, trainstack.commands.size_fsx; "
        "sys.exit(any(name.startswith(('aws_cdk', 'constructs', 'jsii')) for name in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
