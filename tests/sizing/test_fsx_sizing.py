"""FSx sizing: SageMaker's worked example, exact plans, properties against a brute-force search."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.fsx_sizing import FsxSizingError, size_fsx
from trainstack.prices import FSX_LUSTRE_PRICES

# Facts restated from the Lustre user guide, independently of the module under test.
SSD_CAPACITIES_GIB = [1200, *range(2400, 1_000_000 + 1, 2400)]
BASELINE_MBPS_PER_TIB = {
    ("SCRATCH_2", None): 200,
    ("PERSISTENT_2", 125): 125,
    ("PERSISTENT_2", 250): 250,
    ("PERSISTENT_2", 500): 500,
    ("PERSISTENT_2", 1000): 1000,
}


def cheapest_by_brute_force(dataset_gib: float, need_mbps: float, deployment_type: str | None):
    """Every (tier, capacity) pair that meets the need, keeping those of the lowest monthly cost."""
    options = [
        (round(capacity * FSX_LUSTRE_PRICES.usd_per_gb_month[tier], 2), capacity, tier)
        for tier, per_tib in BASELINE_MBPS_PER_TIB.items()
        if deployment_type in (None, tier[0])
        for capacity in SSD_CAPACITIES_GIB
        if capacity >= dataset_gib and capacity * per_tib / 1024 >= need_mbps
    ]
    if not options:
        return None
    lowest = min(cost for cost, _, _ in options)
    return lowest, [(capacity, tier) for cost, capacity, tier in options if cost == lowest]


def test_sagemaker_worked_example_100_gb_in_a_30_second_epoch():
    # SageMaker's example: a 100 GB (10**9 bytes) dataset read in a 30 s epoch needs about 3.3 GB/s.
    dataset_gib = 100e9 / 2**30
    plan = size_fsx(dataset_gib, epoch_seconds=30, deployment_type="SCRATCH_2")
    assert plan.required_mbps == pytest.approx(3333.3, abs=0.1)
    # Storage grows far past the dataset until its 200 MB/s/TiB baseline covers the need:
    # 16,800 GiB would give 3,281 MB/s, 19,200 GiB gives 3,750 MB/s.
    assert (plan.storage_capacity_gib, plan.throughput_mbps) == (19200, 3750.0)
    assert plan.monthly_cost_usd == 2688.0
    assert plan.ram_cache_gib == pytest.approx(19200 / 1024 * 6.7, abs=0.05)


def test_sagemaker_example_without_a_type_picks_the_cheaper_persistent_tier():
    plan = size_fsx(100e9 / 2**30, epoch_seconds=30)
    assert (plan.deployment_type, plan.per_unit_storage_throughput, plan.storage_capacity_gib) == (
        "PERSISTENT_2",
        500,
        7200,
    )
    assert plan.throughput_mbps == 3515.625
    assert plan.monthly_cost_usd == 2448.0  # scratch would be 19,200 GiB for $2,688


def test_epoch_need_is_gib_read_per_second_in_decimal_megabytes():
    assert size_fsx(100, epoch_seconds=30).required_mbps == pytest.approx(100 * 2**30 / 1e6 / 30)


def test_capacity_alone_gives_the_smallest_file_system():
    plan = size_fsx(500)
    assert (plan.deployment_type, plan.storage_capacity_gib) == ("SCRATCH_2", 1200)
    assert plan.monthly_cost_usd == 168.0  # AWS's own scratch price example: 1,200 x $0.140
    assert plan.throughput_mbps == 234.375


def test_need_exactly_at_a_baseline_does_not_take_one_more_step():
    plan = size_fsx(10, throughput_mbps=2400 * 200 / 1024, deployment_type="SCRATCH_2")
    assert plan.storage_capacity_gib == 2400


def test_persistent_2_restriction_is_honoured_even_when_scratch_is_cheaper():
    assert size_fsx(500).deployment_type == "SCRATCH_2"
    plan = size_fsx(500, deployment_type="PERSISTENT_2")
    assert (plan.deployment_type, plan.per_unit_storage_throughput, plan.storage_capacity_gib) == (
        "PERSISTENT_2",
        125,
        1200,
    )
    assert plan.monthly_cost_usd == 174.0


def test_impossible_throughput_names_the_limit_in_one_sentence():
    with pytest.raises(FsxSizingError) as raised:
        size_fsx(1000, throughput_mbps=5_000_000)
    assert raised.value.parameter == "throughput_mbps"
    assert str(raised.value) == (
        "5,000,000 MB/s is more than one file system of at most 1,000,000 GiB can give "
        "(PERSISTENT_2 at 1000 MB/s/TiB reaches 975,000 MB/s at 998,400 GiB)"
    )
    assert isinstance(raised.value, ValueError)


def test_impossible_need_for_scratch_only_names_scratch_limit():
    size_fsx(1000, throughput_mbps=195_000, deployment_type="SCRATCH_2")  # the most scratch gives
    with pytest.raises(FsxSizingError, match=r"SCRATCH_2 reaches 195,000 MB/s at 998,400 GiB"):
        size_fsx(1000, throughput_mbps=195_001, deployment_type="SCRATCH_2")


def test_impossible_epoch_says_how_long_an_epoch_must_be():
    with pytest.raises(FsxSizingError) as raised:
        size_fsx(1000, epoch_seconds=0.5)
    assert raised.value.parameter == "epoch_seconds"
    assert "reading 1,000 GiB every 0.5 s needs 2,147,484 MB/s" in str(raised.value)
    assert str(raised.value).endswith("allow at least 1.11 s per epoch")
    size_fsx(1000, epoch_seconds=1.11)  # the advice is enough


def test_dataset_larger_than_a_file_system_names_the_dataset():
    with pytest.raises(FsxSizingError) as raised:
        size_fsx(999_000)
    assert raised.value.parameter == "dataset_gib"
    assert "999,000 GiB does not fit one file system of at most 1,000,000 GiB" in str(raised.value)


@pytest.mark.parametrize(
    ("kwargs", "parameter", "text"),
    [
        ({"dataset_gib": 0}, "dataset_gib", "0 is not a size in GiB above 0"),
        ({"dataset_gib": 10, "throughput_mbps": -5}, "throughput_mbps", "-5 is not a rate in MB/s above 0"),
        ({"dataset_gib": 10, "epoch_seconds": float("nan")}, "epoch_seconds", "nan is not a duration"),
        ({"dataset_gib": 1, "deployment_type": "SCRATCH_1"}, "deployment_type", "SCRATCH_2 or PERSISTENT_2"),
        ({"dataset_gib": 10, "throughput_mbps": 1, "epoch_seconds": 1}, "throughput_mbps", "not both"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, parameter, text):
    dataset_gib = kwargs.pop("dataset_gib")
    with pytest.raises(FsxSizingError) as raised:
        size_fsx(dataset_gib, **kwargs)
    assert raised.value.parameter == parameter
    assert text in str(raised.value)


# Log-scale magnitudes so small, medium and out-of-range needs all come up.
magnitudes = st.builds(lambda mantissa, power: mantissa * 10.0**power, st.floats(1, 10), st.integers(-2, 6))
deployment_types = st.sampled_from([None, "SCRATCH_2", "PERSISTENT_2"])


def assert_cheapest_valid_plan(dataset_gib: float, need_mbps: float, deployment_type: str | None) -> None:
    expected = cheapest_by_brute_force(dataset_gib, need_mbps, deployment_type)
    kwargs = {"throughput_mbps": need_mbps} if need_mbps else {}
    if expected is None:
        with pytest.raises(FsxSizingError):
            size_fsx(dataset_gib, deployment_type=deployment_type, **kwargs)
        return
    plan = size_fsx(dataset_gib, deployment_type=deployment_type, **kwargs)
    tier = (plan.deployment_type, plan.per_unit_storage_throughput)
    # A valid configuration of its type ...
    assert tier in BASELINE_MBPS_PER_TIB
    assert deployment_type in (None, plan.deployment_type)
    assert plan.storage_capacity_gib in SSD_CAPACITIES_GIB
    # ... that holds the dataset and reads at least as fast as needed ...
    assert plan.storage_capacity_gib >= dataset_gib
    assert plan.throughput_mbps == plan.storage_capacity_gib * BASELINE_MBPS_PER_TIB[tier] / 1024
    assert plan.throughput_mbps >= need_mbps
    # ... and no valid configuration costs less; among equals it is the smallest.
    lowest, cheapest = expected
    assert plan.monthly_cost_usd == lowest
    assert (plan.storage_capacity_gib, tier) in cheapest
    assert plan.storage_capacity_gib == min(capacity for capacity, _ in cheapest)


@settings(max_examples=300, deadline=None)
@given(dataset_gib=magnitudes, need_mbps=st.just(0.0) | magnitudes, deployment_type=deployment_types)
def test_plan_is_valid_meets_the_need_and_nothing_cheaper_exists(dataset_gib, need_mbps, deployment_type):
    assert_cheapest_valid_plan(dataset_gib, need_mbps, deployment_type)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.sampled_from(SSD_CAPACITIES_GIB),
    per_tib=st.sampled_from(sorted(set(BASELINE_MBPS_PER_TIB.values()))),
    just_above=st.booleans(),
    deployment_type=deployment_types,
)
def test_needs_on_a_baseline_boundary_round_correctly(capacity, per_tib, just_above, deployment_type):
    # Float rounding at exact baselines must neither skip a capacity nor fall one short.
    need = capacity * per_tib / 1024
    assert_cheapest_valid_plan(1, math.nextafter(need, math.inf) if just_above else need, deployment_type)


@settings(max_examples=100, deadline=None)
@given(dataset_gib=magnitudes, epoch_seconds=magnitudes, deployment_type=deployment_types)
def test_epoch_plans_match_the_equivalent_throughput(dataset_gib, epoch_seconds, deployment_type):
    need = dataset_gib * 2**30 / 1e6 / epoch_seconds
    try:
        by_epoch = size_fsx(dataset_gib, epoch_seconds=epoch_seconds, deployment_type=deployment_type)
    except FsxSizingError as error:
        assert cheapest_by_brute_force(dataset_gib, need, deployment_type) is None, error
        return
    by_rate = size_fsx(dataset_gib, throughput_mbps=by_epoch.required_mbps, deployment_type=deployment_type)
    assert by_epoch == by_rate
    assert by_epoch.required_mbps == pytest.approx(need)
