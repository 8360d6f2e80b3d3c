"""The billed resources of a config's deployment, read from the validated config instead of the templates:
what `trainstack check-config` prices, since synthesizing takes tens of seconds and the CLI may run
without the CDK installed. tests/cost/ holds this equal to trainstack.idle_cost.count_in_templates of the
synthesized app for every config in config/ and config/examples/ and a variant (NAT egress, queue mode
without teams, a customer managed key, no file system); tests/infra/test_governed.py for control-tower
with a created VPC and with an existing one."""

from __future__ import annotations

from trainstack.config import Settings
from trainstack.governance import CONTROL_TOWER
from trainstack.idle_cost import BilledResources, FileSystemSize
from trainstack.pipeline_runs import all_pipeline_runs
from trainstack.team_tracking import uses_mlflow

# The network stack's interface endpoints with egress "endpoints": ECR api and dkr, CloudWatch Logs, STS,
# SageMaker API (stacks/network/network_stack.py), all in the one training AZ.
BASE_INTERFACE_ENDPOINTS = 5
# Each pipeline's alarms read: a failed-or-timed-out run (2 metrics), the orphan sweep, a long capacity
# wait, infrastructure faults and throttling (1 each), and failures or timeouts of each cleanup machine
# (2 each): the job cleanup and its sweeper, plus the queue's pair in queue mode.
RUN_AND_FAULT_ALARM_METRICS = 6
METRICS_PER_CLEANUP_MACHINE = 2


def billed_resources(settings: Settings) -> BilledResources:
    network = settings.network
    created_vpc = network.existing is None
    governed = settings.compliance == CONTROL_TOWER
    pipelines = all_pipeline_runs(settings)
    endpoints = 0
    if network.egress == "endpoints":
        endpoints = (
            BASE_INTERFACE_ENDPOINTS + (governed and control_tower_endpoint(settings)) + uses_mlflow(settings)
        )
    nat = int(network.egress == "nat" and created_vpc)
    plan = settings.fsx_plan
    file_systems = (
        (FileSystemSize(plan.deployment_type, plan.per_unit_storage_throughput, plan.storage_capacity_gib),)
        if plan
        else ()
    )
    alarm_metrics = sum(
        RUN_AND_FAULT_ALARM_METRICS + METRICS_PER_CLEANUP_MACHINE * (4 if runs.queue.enabled else 2)
        for runs in pipelines
    )
    return BilledResources(
        interface_endpoint_azs=endpoints,
        nat_gateways=nat,
        public_ipv4_addresses=nat,
        file_systems=file_systems,
        dashboards=len(pipelines),
        alarm_metrics=alarm_metrics,
        kms_keys=_kms_keys(settings, governed, len(pipelines)),
    )


def _kms_keys(settings: Settings, governed: bool, pipelines: int) -> int:
    """Each pipeline's notification topic key; control-tower's keys; the run-data key that
    `encryption.customer_managed_key` creates (under control-tower the bucket key serves instead)."""
    if governed:
        return pipelines + 1 + control_tower_log_keys(settings)
    return pipelines + settings.encryption.customer_managed_key


def control_tower_log_keys(settings: Settings) -> int:
    """compliance: control-tower encrypts every log group with a key of its stack's own: the created VPC's
    flow logs, the built image's copy function, each pipeline (stacks/governed_account.py)."""
    created_vpc = settings.network.existing is None
    return created_vpc + (settings.image.uri is None) + len(all_pipeline_runs(settings))


def control_tower_endpoint(settings: Settings) -> bool:
    """compliance: control-tower runs CDK's default-security-group handler in a created VPC: with egress
    "endpoints" it reaches the EC2 API through one more interface endpoint."""
    return settings.network.existing is None and settings.network.egress == "endpoints"
