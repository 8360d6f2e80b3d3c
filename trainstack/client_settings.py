"""What `trainstack` needs to act on one deployed pipeline, published with it: no YAML, no checkout.

Each pipeline stack writes the validated config it was synthesized from to an SSM String parameter,
`/<namespace>/client` (`/<project>-<team>/client` with teams, else `/<project>/client`). The CLI, given
`--deployment <project> --team <team>`, reads it back through the same model, so every command checks a
request by the rules the deployed state machine applies; the state machine itself it finds as with a config
(the pipeline stack's StateMachineArn output). The team's start policy grants reading its own parameter.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from trainstack.config import Settings
from trainstack.teams import namespace

# SSM parameter value limits by tier (AWS Systems Manager User Guide, "Managing parameter tiers": standard
# parameters hold up to 4 KB, advanced ones up to 8 KB).
STANDARD_TIER_MAX_BYTES = 4096
ADVANCED_TIER_MAX_BYTES = 8192


def client_parameter_name(project: str, team: str | None) -> str:
    """`/<namespace>/client`: the parameter of the team's pipeline (or the project's, without teams)."""
    return f"/{namespace(project, team)}/client"


def client_document(settings: Settings, team: str | None = None) -> str:
    """The config as the CLI of `team` (or of the one-team deployment) needs it: compact JSON of what the
    config sets other than the defaults, holding no other team's entry (names, caps, principals)."""
    document = settings.model_dump(mode="json", exclude_defaults=True)
    if team is not None:
        document["teams"] = [entry for entry in document["teams"] if entry["name"] == team]
        # Another team's migration choices stay out too: the team's document is the same whatever they are.
        migrations = document.get("migrations", {})
        kept = [name for name in migrations.pop("keep_team_trigger_tables", []) if name == team]
        if kept:
            migrations["keep_team_trigger_tables"] = kept
        if not migrations:
            document.pop("migrations", None)
    return json.dumps(document, separators=(",", ":"))


def client_tier(document: str) -> str:
    """The SSM tier that holds the document: Standard (free) when it fits, else Advanced; a config beyond
    Advanced's limit is refused at synth with one sentence (ValueError)."""
    size = len(document.encode())
    if size <= STANDARD_TIER_MAX_BYTES:
        return "Standard"
    if size <= ADVANCED_TIER_MAX_BYTES:
        return "Advanced"
    raise ValueError(
        f"the config is {size} bytes as the CLI's published settings, more than an SSM parameter holds "
        f"({ADVANCED_TIER_MAX_BYTES}); shorten it (fewer profiles or hyperparameters per profile)"
    )


class ClientSettingsError(Exception):
    """The deployment's published settings cannot be read; str() is one sentence naming the flags."""


def read_client_settings(ssm: Any, deployment: str, team: str | None) -> Settings:
    """The config the pipeline of `deployment` (and `team`) was deployed with, from its SSM parameter."""
    name = client_parameter_name(deployment, team)
    given = f"--deployment {deployment}" + (f" --team {team}" if team else "")
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if error.response["Error"]["Code"] != "ParameterNotFound":
            raise
        region = ssm.meta.region_name
        raise ClientSettingsError(
            f"{given}: no parameter {name} in {region}; check the deployment's name, the team and the region "
            "(--region), or ask the platform team whether this deployment publishes it"
        ) from None
    try:
        return Settings.model_validate(json.loads(value))
    except (ValueError, ValidationError):
        raise ClientSettingsError(
            f"{given}: parameter {name} does not hold settings this trainstack reads; use the trainstack "
            "version the deployment was made with"
        ) from None
