"""The config the pipeline was synthesized from, published for the CLI (trainstack/client_settings.py): an
ML team member runs `trainstack --deployment <project> --team <team>` with no YAML and no checkout."""

from __future__ import annotations

from aws_cdk import aws_ssm as ssm
from constructs import Construct

from trainstack.client_settings import client_parameter_name, client_tier


class ClientSettings(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, project: str, document: str) -> None:
        """`project`: the pipeline's namespace (`<project>-<team>` with teams)."""
        super().__init__(scope, construct_id)
        self.parameter = ssm.StringParameter(
            self,
            "Parameter",
            parameter_name=client_parameter_name(project, None),
            string_value=document,
            tier=ssm.ParameterTier(client_tier(document).upper()),
            description="trainstack: the settings the CLI reads for --deployment and --team",
        )
