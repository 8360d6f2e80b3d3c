"""Infra fixtures: network + storage synthesized per config variant; the default config is the whole app."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CDK_CONTEXT, DEFAULT_CONFIG, NO_ENV, deep_merge, default_config_data
from tests.infra.templates import load_templates


@dataclass
class InfraApp:
    settings: Any
    network: Any  # stacks.network.network_stack.NetworkStack
    storage: Any  # stacks.storage.storage_stack.StorageStack
    outdir: Path

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        return load_templates(self.outdir)

    @property
    def network_template(self) -> dict[str, Any]:
        return self.templates[self.network.stack_name]

    @property
    def storage_template(self) -> dict[str, Any]:
        return self.templates[self.storage.stack_name]


def settings_with(overrides: dict[str, Any]):
    from trainstack.config_loading import parse_settings

    return parse_settings(deep_merge(default_config_data(), overrides), NO_ENV, source=str(DEFAULT_CONFIG))


def synthesize_infra(settings, outdir: Path) -> InfraApp:
    """Network and storage stacks alone, with cdk.json's flags and the AwsSolutions checks as in build_app:
    faster than the whole app, which config variants do not change beyond these two stacks."""
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from stacks.app_builder import network_stack, storage_stack

    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    env = cdk.Environment(account=settings.account, region=settings.region)
    network = network_stack(app, settings, env=env)
    storage = storage_stack(app, settings, network, env=env)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return InfraApp(settings, network, storage, outdir)


def infra_fixture(name: str, overrides: dict[str, Any]):
    """A fixture synthesizing one config variant once per test process."""

    @pytest.fixture(scope="session")
    def fixture(tmp_path_factory) -> InfraApp:
        return synthesize_infra(settings_with(overrides), tmp_path_factory.mktemp(f"{name}.cdk.out"))

    return fixture


# Variants, chosen so that each switch is exercised at least once; the default config is the full app.
AZ_ID_NAT_SCRATCH = {
    "availability_zone": None,
    "availability_zone_id": "use1-az4",
    "network": {"egress": "nat"},
    "fsx": {"deployment_type": "SCRATCH_2"},
    "dataset": {"bucket_name": "existing-training-data", "prefix": "corpus/v2/"},
    "checkpoints": {"retention_days": 14, "noncurrent_version_days": 3},
}
EXISTING_VPC = {
    "vpc_id": "vpc-0a1b2c3d4e5f60718",
    "vpc_cidr": "10.50.0.0/16",
    "subnet_ids": ["subnet-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60719"],
    "route_table_ids": ["rtb-0a1b2c3d4e5f60718"],
}
# 2,400 GiB read at 1,100 MB/s on PERSISTENT_2: 500 MB/s/TiB at 2,400 GiB is the cheapest way. With the
# retrain trigger on: the dataset bucket's events go to EventBridge beside FSx's data repository association.
# No profile names a SageMaker managed MLflow tracking server (the default config's small-torchrun does): no
# experiments endpoint.
IMPORTED_VPC_PERSISTENT_500 = {
    "retrain_on_new_data": {"profile": "small-torchrun", "prefix": "datasets/corpus/"},
    "profiles": [
        {name: value for name, value in profile.items() if name != "mlflow_tracking_server_arn"}
        for profile in default_config_data()["profiles"]
    ],
    "network": {"existing": EXISTING_VPC},
    "dataset": {"size_gib": 2400},
    "fsx": {"throughput_mbps": 1100, "deployment_type": "PERSISTENT_2"},
}
IMPORTED_VPC_NAT_NO_FSX = {
    "network": {"existing": EXISTING_VPC, "egress": "nat"},
    "fsx": {"enabled": False, "throughput_mbps": None},
}

# Every profile checkpoints to the file system: the dataset at /dataset beside the store's /checkpoints.
FSX_STORE = {
    "profiles": [dict(profile, checkpoint_store="fsx") for profile in default_config_data()["profiles"]],
}

az_id_nat_scratch = infra_fixture("az_id_nat_scratch", AZ_ID_NAT_SCRATCH)
fsx_store_infra = infra_fixture("fsx_store_infra", FSX_STORE)
imported_vpc_persistent_500 = infra_fixture("imported_vpc_persistent_500", IMPORTED_VPC_PERSISTENT_500)
imported_vpc_nat_no_fsx = infra_fixture("imported_vpc_nat_no_fsx", IMPORTED_VPC_NAT_NO_FSX)


@pytest.fixture(scope="session")
def default_infra(default_app) -> InfraApp:
    """The default config's network and storage stacks, as synthesized in the whole app."""
    settings, stacks, assembly = default_app
    return InfraApp(settings, stacks.network, stacks.storage, Path(assembly.directory))
