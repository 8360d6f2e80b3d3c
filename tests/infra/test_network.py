"""Network stack: one AZ for everything, EFA and Lustre rules, endpoints or NAT, imported VPC."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.conftest import EXISTING_VPC, InfraApp
from tests.infra.templates import follow_reference, only, resources

INTERFACE_SERVICES = {"ecr.api", "ecr.dkr", "logs", "sts", "sagemaker.api"}
LUSTRE_PORT_RANGES = {(988, 988), (1018, 1023)}


def group_id(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "GroupId"]}


def security_group_id(template: dict[str, Any], description_start: str) -> str:
    matches = [
        name
        for name, body in resources(template, "AWS::EC2::SecurityGroup").items()
        if body["Properties"]["GroupDescription"].startswith(description_start)
    ]
    assert len(matches) == 1, matches
    return matches[0]


def rules(
    template: dict[str, Any], direction: str, group: str, peer: str
) -> set[tuple[str, int | None, int | None]]:
    """(protocol, from port, to port) of standalone rules from `group` to/from the security group `peer`."""
    rule_type, peer_key = (
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId")
        if direction == "in"
        else ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId")
    )
    return {
        (
            body["Properties"]["IpProtocol"],
            body["Properties"].get("FromPort"),
            body["Properties"].get("ToPort"),
        )
        for body in resources(template, rule_type).values()
        if body["Properties"]["GroupId"] == group_id(group)
        and body["Properties"].get(peer_key) == group_id(peer)
    }


def interface_endpoints(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: body
        for name, body in resources(template, "AWS::EC2::VPCEndpoint").items()
        if body["Properties"].get("VpcEndpointType", "Interface") == "Interface"
    }


def gateway_endpoint(template: dict[str, Any]) -> dict[str, Any]:
    [gateway] = [
        body
        for body in resources(template, "AWS::EC2::VPCEndpoint").values()
        if body["Properties"].get("VpcEndpointType") == "Gateway"
    ]
    return gateway


def service_suffix(endpoint: dict[str, Any]) -> str:
    """ecr.api from "com.amazonaws.us-east-1.ecr.api" or its Fn::Join with the region as a Ref;
    experiments from SageMaker's "aws.sagemaker.us-east-1.experiments"."""
    name = endpoint["Properties"]["ServiceName"]
    if isinstance(name, dict):
        name = "".join(part if isinstance(part, str) else "<region>" for part in name["Fn::Join"][1])
    return re.fullmatch(r"(?:com\.amazonaws|aws\.sagemaker)\.[^.]+\.(.+)", name).group(1)


def subnet_placement(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: {key: body["Properties"].get(key) for key in ("AvailabilityZone", "AvailabilityZoneId")}
        for name, body in resources(template, "AWS::EC2::Subnet").items()
    }


# --- one availability zone -------------------------------------------------------------------------


def test_every_subnet_is_in_the_configured_az_by_name(default_infra: InfraApp):
    placement = subnet_placement(default_infra.network_template)
    assert placement
    assert all(
        where == {"AvailabilityZone": "us-east-1a", "AvailabilityZoneId": None}
        for where in placement.values()
    )


def test_az_by_id_is_set_on_every_subnet_without_a_name_lookup(az_id_nat_scratch: InfraApp):
    placement = subnet_placement(az_id_nat_scratch.network_template)
    assert len(placement) == 2  # training + the NAT's public subnet
    assert all(
        where == {"AvailabilityZone": None, "AvailabilityZoneId": "use1-az4"} for where in placement.values()
    )


@pytest.mark.parametrize("variant", ["default_infra", "az_id_nat_scratch"])
def test_synth_needs_no_context_lookup(variant: str, request):
    """No AZ or VPC lookup: `cdk synth` runs offline without credentials."""
    infra: InfraApp = request.getfixturevalue(variant)
    manifest = (infra.outdir / "manifest.json").read_text()
    assert '"missing"' not in manifest


def test_endpoints_and_file_system_sit_in_the_training_subnet(default_infra: InfraApp):
    network = default_infra.network_template
    training_subnets = {
        name for name, body in resources(network, "AWS::EC2::Subnet").items() if "Training" in name
    }
    assert len(training_subnets) == 1 and set(subnet_placement(network)) == training_subnets
    endpoints = interface_endpoints(network)
    assert endpoints
    for endpoint in endpoints.values():
        assert {ref["Ref"] for ref in endpoint["Properties"]["SubnetIds"]} == training_subnets
    file_system = only(default_infra.storage_template, "AWS::FSx::FileSystem")
    [subnet] = file_system["Properties"]["SubnetIds"]
    assert follow_reference(subnet, default_infra.templates) == {"Ref": next(iter(training_subnets))}


# --- security groups ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["default_infra", "imported_vpc_persistent_500"])
def test_training_group_allows_all_traffic_to_and_from_itself_for_efa(variant: str, request):
    network = request.getfixturevalue(variant).network_template
    training = security_group_id(network, "SageMaker training")
    assert ("-1", None, None) in rules(network, "in", training, training)
    assert ("-1", None, None) in rules(network, "out", training, training)


def test_lustre_ports_open_between_training_and_file_system_both_ways(default_infra: InfraApp):
    network = default_infra.network_template
    training = security_group_id(network, "SageMaker training")
    fsx = security_group_id(network, "FSx for Lustre")
    lustre = {("tcp", low, high) for low, high in LUSTRE_PORT_RANGES}
    for direction in ("in", "out"):
        assert rules(network, direction, fsx, training) == lustre
        assert rules(network, direction, training, fsx) == lustre
        assert rules(network, direction, fsx, fsx) == lustre  # file servers talk to each other


def test_file_system_uses_the_lustre_security_group_only(default_infra: InfraApp):
    network = default_infra.network_template
    file_system = only(default_infra.storage_template, "AWS::FSx::FileSystem")
    groups = [
        follow_reference(group, default_infra.templates)
        for group in file_system["Properties"]["SecurityGroupIds"]
    ]
    assert groups == [group_id(security_group_id(network, "FSx for Lustre"))]


def test_no_security_group_accepts_traffic_from_anywhere(default_infra: InfraApp):
    for group in resources(default_infra.network_template, "AWS::EC2::SecurityGroup").values():
        for rule in group["Properties"].get("SecurityGroupIngress", []):
            assert rule.get("CidrIp") != "0.0.0.0/0"


# --- egress: endpoints or NAT ----------------------------------------------------------------------


def test_endpoints_mode_has_private_endpoints_and_nothing_public(default_infra: InfraApp):
    network = default_infra.network_template
    # The default config's small-torchrun logs to an MLflow tracking server: SageMaker's experiments endpoint.
    assert {service_suffix(body) for body in interface_endpoints(network).values()} == INTERFACE_SERVICES | {
        "experiments"
    }
    assert all(body["Properties"]["PrivateDnsEnabled"] for body in interface_endpoints(network).values())
    for resource_type in ("AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::EIP"):
        assert not resources(network, resource_type)
    assert not any(
        body["Properties"].get("MapPublicIpOnLaunch")
        for body in resources(network, "AWS::EC2::Subnet").values()
    )


def test_s3_gateway_endpoint_serves_the_training_route_table(default_infra: InfraApp):
    network = default_infra.network_template
    gateway = gateway_endpoint(network)
    training_route_tables = {
        name for name in resources(network, "AWS::EC2::RouteTable") if "Training" in name
    }
    assert service_suffix(gateway) == "s3"
    assert {ref["Ref"] for ref in gateway["Properties"]["RouteTableIds"]} == training_route_tables


def test_nat_mode_has_one_nat_in_a_public_subnet_and_no_interface_endpoints(az_id_nat_scratch: InfraApp):
    network = az_id_nat_scratch.network_template
    nat = only(network, "AWS::EC2::NatGateway")
    public_subnet = network["Resources"][nat["Properties"]["SubnetId"]["Ref"]]
    assert public_subnet["Properties"]["MapPublicIpOnLaunch"] is True
    assert not interface_endpoints(network)
    training_route = [
        body for name, body in resources(network, "AWS::EC2::Route").items() if "Training" in name
    ]
    assert [route["Properties"].get("NatGatewayId") for route in training_route] == [
        {"Ref": next(iter(resources(network, "AWS::EC2::NatGateway")))}
    ]


def test_created_vpc_logs_its_flows(default_infra: InfraApp):
    network = default_infra.network_template
    flow_log = only(network, "AWS::EC2::FlowLog")
    assert flow_log["Properties"]["ResourceId"] == {"Ref": next(iter(resources(network, "AWS::EC2::VPC")))}
    assert flow_log["Properties"]["TrafficType"] == "ALL"


# --- imported VPC ----------------------------------------------------------------------------------


def test_imported_vpc_creates_no_vpc_and_places_everything_in_its_subnets(
    imported_vpc_persistent_500: InfraApp,
):
    network = imported_vpc_persistent_500.network_template
    for resource_type in ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::FlowLog"):
        assert not resources(network, resource_type)
    for group in resources(network, "AWS::EC2::SecurityGroup").values():
        assert group["Properties"]["VpcId"] == EXISTING_VPC["vpc_id"]
    # An interface endpoint takes one subnet per AZ: all subnets are in the one AZ, so the first serves.
    for endpoint in interface_endpoints(network).values():
        assert endpoint["Properties"]["SubnetIds"] == EXISTING_VPC["subnet_ids"][:1]
    gateway = gateway_endpoint(network)
    assert gateway["Properties"]["RouteTableIds"] == EXISTING_VPC["route_table_ids"]
    endpoint_group = network["Resources"][security_group_id(network, "Interface endpoints")]
    assert [rule["CidrIp"] for rule in endpoint_group["Properties"]["SecurityGroupIngress"]] == [
        EXISTING_VPC["vpc_cidr"]
    ]
    assert network["Outputs"]["TrainingSubnetIds"]["Value"] == ",".join(EXISTING_VPC["subnet_ids"])
    file_system = only(imported_vpc_persistent_500.storage_template, "AWS::FSx::FileSystem")
    assert (
        follow_reference(file_system["Properties"]["SubnetIds"][0], imported_vpc_persistent_500.templates)
        == (EXISTING_VPC["subnet_ids"][0])
    )


def test_imported_vpc_with_its_own_egress_gets_no_endpoints(imported_vpc_nat_no_fsx: InfraApp):
    network = imported_vpc_nat_no_fsx.network_template
    assert not resources(network, "AWS::EC2::VPCEndpoint")
    assert not resources(network, "AWS::EC2::NatGateway")


def test_outputs_name_subnets_and_security_groups(default_infra: InfraApp):
    outputs = default_infra.network_template["Outputs"]
    assert {"VpcId", "TrainingSubnetIds", "TrainingSecurityGroupId", "FsxSecurityGroupId"} <= set(outputs)


def test_a_profile_logging_to_mlflow_gets_the_experiments_endpoint(
    default_infra: InfraApp, imported_vpc_persistent_500: InfraApp
):
    """Jobs in `egress: endpoints` reach a SageMaker managed MLflow server only through its endpoint
    (aws.sagemaker.<region>.experiments); without a tracking server the app creates none."""

    def experiments(infra: InfraApp) -> list[dict[str, Any]]:
        return [
            body
            for body in interface_endpoints(infra.network_template).values()
            if "experiments" in json.dumps(body["Properties"]["ServiceName"])
        ]

    [endpoint] = experiments(default_infra)
    assert endpoint["Properties"]["PrivateDnsEnabled"]
    assert endpoint["Properties"]["ServiceName"] == "aws.sagemaker.us-east-1.experiments"
    assert experiments(imported_vpc_persistent_500) == []
