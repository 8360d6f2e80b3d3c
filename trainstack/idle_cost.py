"""What a deployment costs per month while no training runs, counted from its synthesized templates and
priced at the dated list prices of its own Region (trainstack/infra_prices.py).

`make synth` counts the templates it has just written (count_in_templates); `trainstack check-config`,
which cannot synthesize in seconds, counts the same resources from the validated config
(trainstack/idle_resources.py), and a test holds the two equal for every config the project ships.
A resource type with no rule here is not priced, and neither is the total: never a guessed figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from trainstack.infra_prices import INFRA_PRICES, InfraPriceTable
from trainstack.prices import HOURS_PER_MONTH


@dataclass(frozen=True)
class FileSystemSize:
    deployment_type: str
    per_unit_storage_throughput: int | None  # MB/s/TiB; None on scratch
    storage_capacity_gib: int


@dataclass(frozen=True)
class BilledResources:
    """What bills by the hour or month whatever the use: the idle cost's inputs."""

    interface_endpoint_azs: int = 0  # interface endpoints x the AZs (subnets) each is in
    nat_gateways: int = 0
    public_ipv4_addresses: int = 0  # Elastic IPs (the NAT gateway's)
    file_systems: tuple[FileSystemSize, ...] = ()
    dashboards: int = 0
    alarm_metrics: int = 0
    kms_keys: int = 0
    secrets: int = 0
    unpriced: tuple[str, ...] = field(default=())  # resource types (and why) no rule prices


# Billed only by what is stored or done (the idle line's "not counted" sentence names the rates).
BY_USE_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::S3Express::DirectoryBucket",
        "AWS::ECR::Repository",
        "AWS::Logs::LogGroup",
        "AWS::Logs::MetricFilter",  # a custom metric bills only for the hours it receives data
        "AWS::EC2::FlowLog",  # the log group's ingestion
    }
)
# No charge of their own (each service's pricing page; infra_prices.py's docstring).
FREE_TYPES = frozenset(
    {
        "AWS::CDK::Metadata",
        "AWS::Batch::JobQueue",
        "AWS::Batch::SchedulingPolicy",
        "AWS::Batch::ServiceEnvironment",
        "AWS::Batch::ComputeEnvironment",
        "AWS::EC2::VPC",
        "AWS::EC2::Subnet",
        "AWS::EC2::RouteTable",
        "AWS::EC2::Route",
        "AWS::EC2::SubnetRouteTableAssociation",
        "AWS::EC2::InternetGateway",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::EC2::SecurityGroupIngress",
        "AWS::Events::Rule",
        "AWS::Scheduler::Schedule",
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::Policy",
        "AWS::IAM::Role",
        "AWS::KMS::Alias",
        "AWS::Lambda::Function",
        "AWS::Lambda::Permission",
        "AWS::Logs::ResourcePolicy",
        "AWS::S3::BucketPolicy",
        "AWS::S3Express::BucketPolicy",
        "AWS::SNS::Topic",
        "AWS::SNS::TopicPolicy",
        "AWS::SNS::Subscription",
        "AWS::SSM::Parameter",
        "AWS::SageMaker::ModelPackageGroup",
        "AWS::StepFunctions::StateMachine",
        "AWS::StepFunctions::StateMachineVersion",
        "AWS::StepFunctions::StateMachineAlias",
    }
)
HIGH_RESOLUTION_SECONDS = 60  # an alarm on a shorter period is billed at the high-resolution rate


def count_in_templates(templates: Iterable[Mapping[str, Any]]) -> BilledResources:
    """The billed resources of synthesized CloudFormation templates (the whole app's)."""
    counts: dict[str, Any] = {"file_systems": [], "unpriced": []}

    def add(key: str, number: int = 1) -> None:
        counts[key] = counts.get(key, 0) + number

    for template in templates:
        for body in template.get("Resources", {}).values():
            kind, properties = body["Type"], body.get("Properties", {})
            if kind in BY_USE_TYPES or kind in FREE_TYPES or kind.startswith("Custom::"):
                continue  # custom resources: a Lambda-backed handler, run at deploy time only
            endpoint_type = properties.get("VpcEndpointType", "Gateway")  # CloudFormation's default
            if kind == "AWS::EC2::VPCEndpoint" and endpoint_type == "Gateway":
                continue  # S3 and DynamoDB gateway endpoints are free
            if (
                kind == "AWS::EC2::VPCEndpoint"
                and endpoint_type == "Interface"
                and isinstance(properties.get("SubnetIds"), list)
            ):
                add("interface_endpoint_azs", len(properties["SubnetIds"]))
            elif kind == "AWS::EC2::NatGateway":
                add("nat_gateways")
            elif kind == "AWS::EC2::EIP":
                add("public_ipv4_addresses")
            elif (
                kind == "AWS::FSx::FileSystem"
                and properties.get("FileSystemType") == "LUSTRE"
                and isinstance(properties.get("StorageCapacity"), int)
            ):
                lustre = properties.get("LustreConfiguration", {})
                counts["file_systems"].append(
                    FileSystemSize(
                        lustre.get("DeploymentType", "SCRATCH_1"),
                        lustre.get("PerUnitStorageThroughput"),
                        properties["StorageCapacity"],
                    )
                )
            elif kind == "AWS::CloudWatch::Dashboard":
                add("dashboards")
            elif kind == "AWS::CloudWatch::Alarm" and _standard_metric_alarm(properties):
                add("alarm_metrics", _alarm_metrics(properties))
            elif kind == "AWS::KMS::Key":
                add("kms_keys")
            elif kind == "AWS::SecretsManager::Secret":
                add("secrets")
            elif kind == "AWS::DynamoDB::Table" and properties.get("BillingMode") == "PAY_PER_REQUEST":
                continue  # on demand: storage and requests only
            else:
                counts["unpriced"].append(kind)
    counts["file_systems"] = tuple(counts["file_systems"])
    counts["unpriced"] = tuple(sorted(set(counts["unpriced"])))
    return BilledResources(**counts)


def _alarm_metrics(properties: Mapping[str, Any]) -> int:
    """CloudWatch bills an alarm per metric it reads: a metric math alarm counts each metric in it."""
    if "Metrics" not in properties:
        return 1
    return sum(1 for query in properties["Metrics"] if "MetricStat" in query)


def _standard_metric_alarm(properties: Mapping[str, Any]) -> bool:
    """An alarm on plain metrics or metric math at standard resolution: high-resolution and anomaly
    detection alarms bill at other rates, which are not priced here."""
    queries = properties.get("Metrics", [])
    periods = [properties.get("Period", HIGH_RESOLUTION_SECONDS)] + [
        query["MetricStat"].get("Period", HIGH_RESOLUTION_SECONDS)
        for query in queries
        if "MetricStat" in query
    ]
    anomaly = any("ANOMALY_DETECTION" in str(query.get("Expression", "")) for query in queries)
    return not anomaly and all(period >= HIGH_RESOLUTION_SECONDS for period in periods)


@dataclass(frozen=True)
class CostLine:
    what: str
    monthly_usd: float | None  # None: not priced


@dataclass(frozen=True)
class IdleCost:
    region: str
    as_of: date | None  # None: the Region is not priced at all
    lines: tuple[CostLine, ...]
    not_counted: str

    @property
    def total_usd(self) -> float | None:
        if self.as_of is None or any(line.monthly_usd is None for line in self.lines):
            return None
        return round(sum(line.monthly_usd for line in self.lines), 2)

    def render(self) -> list[str]:
        """The lines `make synth` and `check-config` print: the total first, then one per item."""
        if self.as_of is None:
            return [self.not_counted]
        total = self.total_usd
        head = f"idle monthly cost in {self.region} ({self.region} list prices of {self.as_of}): " + (
            _dollars(total) if total is not None else "not known (an item below is not priced)"
        )
        items = [f"  {line.what}: {_dollars(line.monthly_usd)}" for line in self.lines]
        return [head, *items, f"  not counted: {self.not_counted}"]


def idle_cost(resources: BilledResources, region: str) -> IdleCost:
    prices = INFRA_PRICES.get(region)
    if prices is None:
        return IdleCost(
            region,
            None,
            (),
            f"idle monthly cost: {region} is not priced (trainstack has dated prices for "
            f"{', '.join(sorted(INFRA_PRICES))} only: trainstack/infra_prices.py)",
        )
    return IdleCost(region, prices.as_of, tuple(_lines(resources, prices)), _not_counted(resources, prices))


def _lines(resources: BilledResources, prices: InfraPriceTable) -> Iterable[CostLine]:
    hours = HOURS_PER_MONTH
    if resources.interface_endpoint_azs:
        yield CostLine(
            f"{resources.interface_endpoint_azs} interface endpoint-AZs x {hours} h at "
            f"{rate(prices.interface_endpoint_az_hour)}/h",
            round(resources.interface_endpoint_azs * hours * prices.interface_endpoint_az_hour, 2),
        )
    if resources.nat_gateways:
        yield CostLine(
            f"{resources.nat_gateways} NAT gateway(s) x {hours} h at {rate(prices.nat_gateway_hour)}/h",
            round(resources.nat_gateways * hours * prices.nat_gateway_hour, 2),
        )
    if resources.public_ipv4_addresses:
        yield CostLine(
            f"{resources.public_ipv4_addresses} public IPv4 address(es) x {hours} h at "
            f"{rate(prices.public_ipv4_hour)}/h",
            round(resources.public_ipv4_addresses * hours * prices.public_ipv4_hour, 2),
        )
    for size in resources.file_systems:
        yield _file_system_line(size, prices)
    for count, what, price in (
        (resources.dashboards, "CloudWatch dashboard(s)", prices.dashboard_month),
        (resources.alarm_metrics, "alarm metrics (standard resolution)", prices.alarm_metric_month),
        (resources.kms_keys, "KMS customer managed key(s)", prices.kms_key_month),
        (resources.secrets, "Secrets Manager secret(s)", prices.secret_month),
    ):
        if count:
            yield CostLine(f"{count} {what} at {rate(price)}/month", round(count * price, 2))
    if resources.unpriced:
        yield CostLine(f"resources of types trainstack does not price: {', '.join(resources.unpriced)}", None)


def _dollars(monthly_usd: float | None) -> str:
    return "not priced" if monthly_usd is None else f"${monthly_usd:,.2f}"


def rate(usd: float) -> str:
    """A list price as AWS writes it: at least two decimals ($0.10), three where it has them ($0.023)."""
    text = f"{usd:.3f}"
    return "$" + (text[:-1] if text.endswith("0") else text)


def file_system_monthly_usd(size: FileSystemSize, prices: InfraPriceTable) -> float | None:
    """One file system's storage charge a month; None where FSx for Lustre or its tier is not priced."""
    table = prices.fsx_lustre
    key = (size.deployment_type, size.per_unit_storage_throughput)
    if table is None or key not in table.usd_per_gb_month:
        return None
    return table.monthly_cost_usd(*key, size.storage_capacity_gib)


def _file_system_line(size: FileSystemSize, prices: InfraPriceTable) -> CostLine:
    per_unit = size.per_unit_storage_throughput
    throughput = f" at {per_unit} MB/s/TiB" if per_unit else ""
    what = f"FSx for Lustre {size.deployment_type}{throughput}, {size.storage_capacity_gib:,} GiB"
    monthly = file_system_monthly_usd(size, prices)
    if monthly is None:
        return CostLine(f"{what} (FSx for Lustre is not priced in {prices.region})", None)
    per_gb = prices.fsx_lustre.usd_per_gb_month[(size.deployment_type, size.per_unit_storage_throughput)]
    return CostLine(f"{what} at {rate(per_gb)}/GB-month", monthly)


def _not_counted(resources: BilledResources, prices: InfraPriceTable) -> str:
    """What bills by use: named with its rate, never estimated (nothing in a template says how much)."""
    by_use = [
        f"data stored in S3 ({rate(prices.s3_standard_gb_month)}/GB-month Standard; S3 Express directory "
        "buckets at their own rate)",
        f"DynamoDB tables (on demand: {rate(prices.dynamodb_storage_gb_month)}/GB-month and requests)",
        f"ECR images ({rate(prices.ecr_storage_gb_month)}/GB-month)",
        f"CloudWatch Logs ({rate(prices.logs_ingestion_gb)}/GB ingested, "
        f"{rate(prices.logs_storage_gb_month)}/GB-month stored)",
        f"endpoint-processed data ({rate(prices.interface_endpoint_gb)}/GB)",
        *([f"NAT-processed data ({rate(prices.nat_gateway_gb)}/GB)"] if resources.nat_gateways else []),
        f"KMS requests ({rate(prices.kms_requests_per_10k)}/10,000)",
        "Step Functions transitions (the sweepers run on a schedule)",
        "the account's CloudWatch free tier",
        "every training job",
    ]
    return ", ".join(by_use)


def idle_cost_of_templates(templates: Iterable[Mapping[str, Any]], region: str) -> IdleCost:
    return idle_cost(count_in_templates(templates), region)
