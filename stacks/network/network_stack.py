"""Network: one VPC, training subnet(s) in ONE availability zone, private AWS access, EFA and Lustre rules."""

from __future__ import annotations

import ipaddress

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from stacks.governed_account import handler_subnet_parameter_name, place_provider_in_vpc
from stacks.validation import acknowledge
from trainstack.config import ExistingNetwork, NetworkSettings, TrainingZone

# Lustre: LNet on TCP 988 plus the 1018-1023 range, between file servers and clients in both directions.
LUSTRE_PORTS = {"TCP 988": ec2.Port.tcp(988), "TCP 1018-1023": ec2.Port.tcp_range(1018, 1023)}

# What a training container in a subnet without internet reaches over PrivateLink. SageMaker pulls the
# training image itself (outside the VPC); the ECR endpoints serve code in the container that pulls or
# inspects images. sagemaker.runtime is for invoking endpoints and is not needed by training.
INTERFACE_ENDPOINT_SERVICES = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "CloudWatchLogs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "SageMakerApi": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API,
}

FLOW_LOG_RETENTION = logs.RetentionDays.THREE_MONTHS

PINNED_AZ_REASON = (
    "trainstack pins training to ONE availability zone on purpose (EFA, FSx and capacity live there)"
)


def pin_subnet_to_az(subnet: ec2.ISubnet, zone: TrainingZone) -> None:
    """Place a created subnet in the configured AZ: by id via the L1 (no lookup), or by name, acknowledged."""
    cfn_subnet = subnet.node.default_child
    if zone.zone_id is not None:
        cfn_subnet.add_property_deletion_override("AvailabilityZone")
        cfn_subnet.add_property_override("AvailabilityZoneId", zone.zone_id)
        return
    # A hard-coded AZ name is the point here; both linters flag it as W3010.
    acknowledge(cfn_subnet, "CloudFormation-Validate::W3010", PINNED_AZ_REASON)
    cfn_subnet.add_metadata(
        "cfn-lint", {"config": {"ignore_checks": ["W3010"], "ignore_reasons": {"W3010": PINNED_AZ_REASON}}}
    )


class NetworkStack(cdk.Stack):
    """The VPC that training jobs and FSx share; everything that needs an AZ uses the configured one."""

    vpc: ec2.IVpc
    training_subnets: list[ec2.ISubnet]
    training_subnet_selection: ec2.SubnetSelection
    training_security_group: ec2.ISecurityGroup
    fsx_security_group: ec2.ISecurityGroup

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        zone: TrainingZone,
        network: NetworkSettings,
        governed: bool,
        mlflow: bool = False,
        **kwargs,
    ) -> None:
        # Read by the availability_zones override below, which CDK calls while building the VPC.
        self._az_label = zone.label
        super().__init__(
            scope,
            construct_id,
            description=f"trainstack network: training in {zone.label} ({network.egress})",
            **kwargs,
        )
        self._project, self._zone, self._network, self._governed = project, zone, network, governed
        self._mlflow = mlflow
        existing = network.existing
        self._vpc_cidr = existing.vpc_cidr if existing else network.vpc_cidr
        if existing is None:
            self._create_vpc()
        else:
            self._import_vpc(existing)
        self.training_subnet_selection = ec2.SubnetSelection(subnets=self.training_subnets)
        self._create_security_groups()
        self.endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        # An existing VPC with egress "nat" reaches AWS on its own; endpoints would collide with its DNS.
        if network.egress == "endpoints":
            self._create_endpoints()
        if governed and existing is None:
            self._handlers_in_vpc()
        self._create_outputs()

    @property
    def handler_subnet_id(self) -> str:
        """The subnet where other stacks' deployment handlers run (compliance: control-tower), as a plain
        string: Control Tower's Lambda rule accepts a string or a subnet of the same template, not a
        cross-stack reference. An imported VPC's first training subnet, or the SSM parameter that
        _handlers_in_vpc writes, resolved by CloudFormation."""
        existing = self._network.existing
        if existing:
            return existing.subnet_ids[0]
        return cdk.CfnDynamicReference(
            cdk.CfnDynamicReferenceService.SSM, handler_subnet_parameter_name(self._project)
        ).to_string()

    @property
    def availability_zones(self) -> list[str]:
        """The one configured AZ, so CDK never looks the region's AZs up (no credentials, no context)."""
        return [self._az_label]

    def _create_vpc(self) -> None:
        network = self._network
        vpc_prefix = ipaddress.IPv4Network(network.vpc_cidr).prefixlen
        # Training gets half the VPC (EFA instances take 5+ private IPs each); the NAT's subnet stays small.
        subnets = [
            ec2.SubnetConfiguration(
                name="Training",
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
                if network.egress == "nat"
                else ec2.SubnetType.PRIVATE_ISOLATED,
                cidr_mask=vpc_prefix + 1,
            )
        ]
        if network.egress == "nat":
            subnets.append(
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=min(vpc_prefix + 4, 28)
                )
            )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(network.vpc_cidr),
            availability_zones=[self._az_label],
            subnet_configuration=subnets,
            nat_gateways=1 if network.egress == "nat" else 0,
            enable_dns_hostnames=True,  # interface endpoints with private DNS need both
            enable_dns_support=True,
            restrict_default_security_group=True,
        )
        for subnet in [*vpc.public_subnets, *vpc.private_subnets, *vpc.isolated_subnets]:
            pin_subnet_to_az(subnet, self._zone)
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogGroup",
            retention=FLOW_LOG_RETENTION,
            removal_policy=cdk.RemovalPolicy.RETAIN,  # network evidence outlives the VPC
        )
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group))
        self.vpc = vpc
        self.training_subnets = vpc.select_subnets(subnet_group_name="Training").subnets
        self._gateway_route_table_ids = [
            subnet.route_table.route_table_id for subnet in self.training_subnets
        ]

    def _import_vpc(self, existing: ExistingNetwork) -> None:
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=existing.vpc_id,
            vpc_cidr_block=self._vpc_cidr,
            availability_zones=[self._az_label],
        )
        self.training_subnets = [
            ec2.Subnet.from_subnet_attributes(
                self, f"TrainingSubnet{index + 1}", subnet_id=subnet_id, availability_zone=self._az_label
            )
            for index, subnet_id in enumerate(existing.subnet_ids)
        ]
        for subnet in self.training_subnets:
            acknowledge(
                subnet,
                "Annotation::@aws-cdk/aws-ec2:noSubnetRouteTableId",
                "The S3 gateway endpoint takes network.existing.route_table_ids directly; "
                "nothing reads subnet route tables.",
            )
        self._gateway_route_table_ids = list(existing.route_table_ids)

    def _create_security_groups(self) -> None:
        training = ec2.SecurityGroup(
            self,
            "TrainingSecurityGroup",
            vpc=self.vpc,
            description="SageMaker training instances: all traffic among themselves (EFA, NCCL), HTTPS out",
            allow_all_outbound=False,
        )
        # EFA's OS-bypass traffic only passes an explicit self-referencing rule, in BOTH directions.
        training.add_ingress_rule(training, ec2.Port.all_traffic(), "EFA and NCCL between training instances")
        training.add_egress_rule(training, ec2.Port.all_traffic(), "EFA and NCCL between training instances")
        # AWS APIs: S3 through the gateway endpoint, others through interface endpoints or the NAT.
        training.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.HTTPS, "AWS APIs (S3, ECR, logs, STS, SageMaker)"
        )

        fsx = ec2.SecurityGroup(
            self,
            "FsxSecurityGroup",
            vpc=self.vpc,
            description="FSx for Lustre: Lustre ports with its own servers and the training instances",
            allow_all_outbound=False,
        )
        for label, port in LUSTRE_PORTS.items():
            for peer, who in ((fsx, "its own file servers"), (training, "training instances")):
                fsx.add_ingress_rule(peer, port, f"Lustre {label} from {who}")
                fsx.add_egress_rule(peer, port, f"Lustre {label} to {who}")
            training.add_ingress_rule(fsx, port, f"Lustre {label} from the file system")
            training.add_egress_rule(fsx, port, f"Lustre {label} to the file system")
        self.training_security_group = training
        self.fsx_security_group = fsx

    def _create_endpoints(self) -> None:
        ec2.CfnVPCEndpoint(
            self,
            "S3GatewayEndpoint",
            vpc_id=self.vpc.vpc_id,
            vpc_endpoint_type="Gateway",
            service_name=ec2.GatewayVpcEndpointAwsService.S3.name,
            route_table_ids=self._gateway_route_table_ids,
        )
        endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface endpoints: HTTPS from the VPC (private DNS answers for the whole VPC)",
            allow_all_outbound=False,
        )
        # The CIDR from the config, not the VPC's attribute: a literal that linters (cdk-nag EC23) can check.
        endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(self._vpc_cidr), ec2.Port.HTTPS, "HTTPS from the VPC"
        )
        # An interface endpoint takes at most one subnet per AZ: the first training subnet serves them all.
        endpoint_subnets = ec2.SubnetSelection(subnets=self.training_subnets[:1])
        services = dict(INTERFACE_ENDPOINT_SERVICES)
        if self._governed and self._network.existing is None:
            # CDK's handler that empties the default security group runs in the VPC (_handlers_in_vpc).
            services["Ec2"] = ec2.InterfaceVpcEndpointAwsService.EC2
        if self._mlflow:
            # A profile's SageMaker managed MLflow tracking server: the client in the image (sagemaker-mlflow)
            # calls https://<region>.experiments.sagemaker.aws, the private DNS name of this service
            # (aws.sagemaker.<region>.experiments in aws-cdk-lib's list of AWS's endpoint services; AWS's
            # page "Connecting to an MLflow tracking server through an Interface VPC Endpoint").
            services["SageMakerExperiments"] = ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_EXPERIMENTS
        for name, service in services.items():
            self.endpoints[name] = ec2.InterfaceVpcEndpoint(
                self,
                f"{name}Endpoint",
                vpc=self.vpc,
                service=service,
                subnets=endpoint_subnets,
                security_groups=[endpoint_security_group],
                open=False,
                private_dns_enabled=True,
            )

    def _handlers_in_vpc(self) -> None:
        """compliance: control-tower: CDK's default-security-group handler runs in the training subnet (HTTPS
        out to the EC2 endpoint or the NAT), and other stacks' handlers find that subnet in SSM: a plain
        string in their templates, which Control Tower's Lambda rule accepts (a cross-stack reference not)."""
        security_group = ec2.SecurityGroup(
            self,
            "HandlerSecurityGroup",
            vpc=self.vpc,
            description="CDK deployment handlers in the VPC: HTTPS to AWS APIs",
            allow_all_outbound=False,
        )
        security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.HTTPS, "AWS APIs (endpoints, S3, NAT)")
        subnet_ids = [self.training_subnets[0].subnet_id]
        place_provider_in_vpc(
            self.node.find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider"),
            subnet_ids,
            security_group,
        )
        # The handler reaches the EC2 API through the endpoint or the NAT: both must be there before it runs.
        restrict = self.vpc.node.find_child("RestrictDefaultSecurityGroupCustomResource")
        restrict.node.add_dependency(self.training_subnets[0].internet_connectivity_established)
        if "Ec2" in self.endpoints:
            restrict.node.add_dependency(self.endpoints["Ec2"])
        ssm.StringParameter(
            self,
            "HandlerSubnetParameter",
            parameter_name=handler_subnet_parameter_name(self._project),
            string_value=subnet_ids[0],
            description="Subnet of trainstack's deployment handlers in the VPC",
        )

    def _create_outputs(self) -> None:
        cdk.CfnOutput(self, "VpcId", value=self.vpc.vpc_id, description="VPC of the training jobs and FSx")
        cdk.CfnOutput(
            self,
            "TrainingSubnetIds",
            value=",".join(subnet.subnet_id for subnet in self.training_subnets),
            description=f"Training subnet(s), all in {self._az_label}: VpcConfig.Subnets of training jobs",
        )
        cdk.CfnOutput(
            self,
            "TrainingSecurityGroupId",
            value=self.training_security_group.security_group_id,
            description="VpcConfig.SecurityGroupIds of training jobs",
        )
        cdk.CfnOutput(self, "FsxSecurityGroupId", value=self.fsx_security_group.security_group_id)
