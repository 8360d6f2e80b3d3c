"""The app synthesized in each config mode whose IAM differs, and every call it makes, simulated once
per mode."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint_store_modes import STORE_MODES
from tests.conftest import NO_ENV, deep_merge, default_config_data
from tests.iam.calls import Call, CallCatalog
from tests.iam.deployed import DeployedApp
from tests.iam.simulator import Decision, simulate
from tests.infra.test_governed import GOVERNED, GOVERNED_QUEUE_EXISTING_NAT
from tests.infra.test_run_data_key import with_run_data_key

# The boundary a platform team might set (the boundary is theirs, not in any template): the services
# trainstack uses, no role changes. Every call must be allowed by it too.
PLATFORM_BOUNDARY = json.loads(Path(__file__).with_name("platform_boundary.json").read_text())
PLAN = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-reserved"
MLFLOW_SERVER = "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/team-tracking"
SHARES = {"queue": {"enabled": True, "shares": {"teamA": 2, "teamB": 1}}}


def with_express_checkpoints(data: dict[str, Any]) -> dict[str, Any]:
    """The training AZ by id and the last profile on the s3-express store (one directory bucket)."""
    profiles = [*data["profiles"][:-1], {**data["profiles"][-1], "checkpoint_store": "s3-express"}]
    merged = {**data, "availability_zone_id": "use1-az4", "profiles": profiles}
    merged.pop("availability_zone", None)
    return merged


def with_plan_and_schedule(data: dict[str, Any]) -> dict[str, Any]:
    """The first profile's first instance type on a training plan, the second profile on a schedule and
    logging to an MLflow tracking server."""
    profiles = [dict(profile) for profile in data["profiles"]]
    first = dict(profiles[0]["instance_preferences"][0], training_plan_arn=PLAN)
    profiles[0]["instance_preferences"] = [first, *profiles[0]["instance_preferences"][1:]]
    profiles[1]["schedule"] = "rate(1 day)"
    profiles[1]["mlflow_tracking_server_arn"] = MLFLOW_SERVER
    return {**data, "profiles": profiles}


def with_fsx_checkpoints(data: dict[str, Any]) -> dict[str, Any]:
    """The first profile checkpoints on the file system (the fsx store: a second, rw, FSx channel)."""
    profiles = [
        dict(profiles, checkpoint_store="fsx") if index == 0 else profiles
        for index, profiles in enumerate(data["profiles"])
    ]
    return {**data, "profiles": profiles}


# retrain_on_new_data on: with FSx (plans-and-schedules) and without (control-tower: FSx off).
TRIGGER = {"retrain_on_new_data": {"profile": "small-torchrun", "prefix": "datasets/corpus/"}}

# Mode -> the config data. The default config already has a spot profile, FSx and a created VPC.
MODES = {
    # Every mode with FSx has a profile on the fsx checkpoint store.
    "plans-and-schedules": lambda data: deep_merge(
        with_fsx_checkpoints(with_plan_and_schedule(data)), TRIGGER
    ),
    "queue-with-plans": lambda data: with_fsx_checkpoints(with_plan_and_schedule(deep_merge(data, SHARES))),
    # control-tower (KMS, boundary, role path) with an imported VPC, FSx off and the queue.
    "control-tower-imported-vpc-no-fsx-queue": lambda data: deep_merge(
        data, deep_merge(deep_merge(GOVERNED, GOVERNED_QUEUE_EXISTING_NAT), TRIGGER)
    ),
    # encryption: a key the storage stack creates, and profiles whose jobs encrypt their volume with it,
    # checkpoint in an SSE-KMS directory bucket (s3-express, the last profile) and on the file system (fsx,
    # the first).
    "customer-managed-key": lambda data: with_fsx_checkpoints(
        with_express_checkpoints(with_run_data_key(data))
    ),
    # Every profile on one checkpoint store, in each governance mode (tests/checkpoint_store_modes.py).
    **STORE_MODES,
}


@dataclass
class SimulatedMode:
    settings: Any
    app: DeployedApp
    calls: list[Call]
    decisions: list[Decision]
    node_seconds: float

    @property
    def denials(self) -> list[Decision]:
        return [decision for decision in self.decisions if not decision.allowed]


def simulate_app(settings, outdir: Path) -> SimulatedMode:
    app = DeployedApp(outdir, settings.account, settings.region)
    calls = CallCatalog(app, settings).calls()
    boundaries = {role.boundary: PLATFORM_BOUNDARY for role in app.roles.values() if role.boundary}
    decisions, seconds = simulate(calls, boundaries)
    return SimulatedMode(settings, app, calls, decisions, seconds)


@pytest.fixture(scope="session")
def simulated_default(default_app) -> SimulatedMode:
    settings, _, assembly = default_app
    return simulate_app(settings, Path(assembly.directory))


@pytest.fixture(scope="session")
def simulated_mode(synthesized_directory):
    """mode name -> its app simulated once per test process (synthesized once per session)."""
    from trainstack.config_loading import parse_settings

    done: dict[str, SimulatedMode] = {}

    def get(mode: str) -> SimulatedMode:
        if mode not in done:
            data = MODES[mode](default_config_data())
            settings = parse_settings(data, NO_ENV, source=f"mode {mode}")
            done[mode] = simulate_app(settings, synthesized_directory(settings))
        return done[mode]

    return get
