"""The configs of the migration tests, each synthesized once per test process (synth is the cost: seconds
each), as the deploy review reads an app: stack name -> template without build noise."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import aws_cdk as cdk
import pytest

from tests.conftest import CDK_CONTEXT, NO_ENV, deep_merge, default_config_data
from trainstack.config_loading import parse_settings

REGISTRY_PROFILE = "small-torchrun"  # the default config's profile with a registry: block
ACCESS_LOGS = "org-s3-access-logs-111111111111"
QUEUE_ON = {"queue": {"enabled": True}}
IMAGE_URI = "111111111111.dkr.ecr.us-east-1.amazonaws.com/ml-images:v1"


def teams(*, inherit: str | None, trigger: str | None = None) -> dict[str, Any]:
    """Two teams running the registry profile; `inherit` sets inherits_single_team_runs on that team,
    `trigger` retrain_on_new_data on that team's dataset prefix. The profile's MLflow tracking server stays
    the one server it was before teams (shared_tracking_server)."""
    team = {"profiles": [REGISTRY_PROFILE], "max_instances": 1, "max_runtime_hours": 8, "max_cost_usd": 500}
    return {
        "shared_tracking_server": True,
        "teams": [
            {
                **team,
                "name": name,
                "principals": [f"arn:aws:iam::111111111111:role/ml-{name}"],
                **({"inherits_single_team_runs": True} if name == inherit else {}),
                **(
                    {"retrain_on_new_data": {"profile": REGISTRY_PROFILE, "prefix": f"datasets/{name}/"}}
                    if name == trigger
                    else {}
                ),
            }
            for name in ("research", "search")
        ],
    }


# Each config: the default config with these changes.
CONFIGS: dict[str, dict[str, Any]] = {
    "single-queue": QUEUE_ON,
    "single-queue-off-kept": {"migrations": {"keep_run_names_table": True}},
    "registry-removed-kept": {
        "migrations": {"keep_model_package_groups": [f"trainstack-{REGISTRY_PROFILE}"]}
    },
    "control-tower": {
        "compliance": "control-tower",
        "access_logs_bucket": ACCESS_LOGS,
        "migrations": {"object_lock_in_place": True},
    },
    "trigger": {"retrain_on_new_data": {"profile": REGISTRY_PROFILE, "prefix": "datasets/corpus/"}},
    "trigger-and-image-off-kept": {
        "image": {"uri": IMAGE_URI},
        "migrations": {"keep_trigger_table": True, "keep_image_repository": True},
    },
    "teams": teams(inherit="research", trigger="search"),
    "teams-trigger-off-kept": {
        **teams(inherit="research"),
        "migrations": {"keep_team_trigger_tables": ["search"]},
    },
    "teams-queue": {
        **QUEUE_ON,
        **teams(inherit="research"),
        "migrations": {"keep_run_names_table": True},
    },
}


def config_data(name: str) -> dict[str, Any]:
    data = copy.deepcopy(deep_merge(default_config_data(), CONFIGS[name]))  # the caller's to change
    if name == "registry-removed-kept":
        next(p for p in data["profiles"] if p["name"] == REGISTRY_PROFILE).pop("registry")
    return data


def settings_of(name: str):
    return parse_settings(config_data(name), NO_ENV, source=name)


def templates_of(assembly) -> dict[str, dict[str, Any]]:
    from trainstack.deploy_changes import strip_build_noise  # the deploy review's reading of a template

    return {stack.stack_name: strip_build_noise(stack.template) for stack in assembly.stacks}


@pytest.fixture(scope="session")
def single_app(default_app) -> dict[str, dict[str, Any]]:
    """The default config (one team, no queue, a registry profile): the session's synthesis of it."""
    return templates_of(default_app[2])


@cache
def app_templates(name: str) -> dict[str, dict[str, Any]]:
    """The config's app: stack name -> template (cdk.json's feature flags, as `make synth`)."""
    from stacks.app_builder import build_app

    app = cdk.App(context=CDK_CONTEXT)
    build_app(app, settings_of(name), nag=False)
    return templates_of(app.synth())
