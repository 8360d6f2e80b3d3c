"""Fixtures shared by every test area: validated settings, the synthesized default app, moto's AWS."""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# As the image sets it (container/Dockerfile): MLflow's telemetry thread sets and unsets a variable in
# os.environ while a test's MLflow client copies the environment for a request (KeyError).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A worker keeps millions of long-lived objects (botocore models, CDK assemblies, emulator histories): at
# CPython's default thresholds (700, 10, 10) the collector rescanned them so often that an emulator file
# took 18 % more CPU (benchmarks/collector_cost.py: tests/pipeline/test_scenarios.py 40.4 against 34.2
# CPU-s). Young garbage is still collected, every 50,000 allocations.
gc.set_threshold(50_000, 20, 10)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
# The CLI feeds cdk.json's feature flags to app.py; tests synthesize with the same ones.
CDK_JSON_CONTEXT = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
# ...and leave each asset where it is, as `cdk synth --no-staging` does: the templates are the same (an
# asset's hash is its content's), and a staged copy per synthesis of cdk-ecr-deployment's 50 MB handler
# filled CI's disk (over 4 GB in a run). Only tests of what staging writes use CDK_JSON_CONTEXT.
CDK_CONTEXT = {**CDK_JSON_CONTEXT, "aws:cdk:disable-asset-staging": True}
# Tests never take account/region from the machine's environment.
NO_ENV: dict[str, str] = {}


# The test files that take longest under `make test`, longest first (seconds in each environment, summed
# from `--durations`; idle 2-core machine, both suites side by side, 2026-12-05). `make test` hands files
# to its workers in collection order (`--dist loadfile --no-loadscope-reorder`), and these come first:
# a one-test demo of two minutes dealt last, as xdist's default order (most tests first) dealt them, kept
# one worker busy alone for minutes after the other had finished. Files not listed follow in their usual
# order.
LONGEST_FILES = (
    "tests/training/test_safety.py",  # 142 s .venv-image
    "tests/training/test_smp.py",  # 118 s .venv-image
    "tests/training/test_examples.py",  # 109 s .venv-image
    "tests/infra/test_store_modes.py",  # 103 s .venv
    "tests/demo/test_demo.py",  # 102 s .venv
    "tests/training/test_in_job_restart.py",  # 94 s .venv-image
    "tests/infra/test_bad_config.py",  # 93 s .venv
    "tests/demo/test_queue_demo.py",  # 89 s .venv
    "tests/infra/test_governed.py",  # 84 s .venv
    "tests/training/test_watchdog.py",  # 79 s .venv-image
    "tests/training/test_checkpoint_stores.py",  # 75 s .venv-image
    "tests/training/test_init_from.py",  # 73 s .venv, 59 s .venv-image
    "tests/training/test_train.py",  # 43 s .venv, 70 s .venv-image
    "tests/demo/test_fault_demo.py",  # 70 s .venv
    "tests/teams/test_teams_quality.py",  # 63 s .venv
    "tests/iam/test_grants_vs_sar.py",  # 61 s .venv
    "tests/iam/test_denied_calls.py",  # 47 s .venv
    "tests/training/test_smddp.py",  # 45 s .venv-image
    "tests/pipeline/test_store_pipeline.py",  # 41 s .venv
    "tests/infra/test_run_data_key.py",  # 41 s .venv
    "tests/training/test_resume_from_store.py",  # 20 s .venv, 38 s .venv-image
    "tests/pipeline/test_scenarios.py",  # 38 s .venv
    "tests/training/test_toolkit_launch.py",  # 35 s .venv-image
    "tests/iam/test_simulated_calls.py",  # 33 s .venv
    "tests/infra/test_fsx_store_app.py",  # 33 s .venv
    "tests/pipeline/test_dataset_manifest.py",  # 32 s .venv
    "tests/pipeline/test_retrain_trigger.py",  # 31 s .venv
    "tests/training/test_launch_matrix.py",  # 31 s .venv-image
)


def pytest_collection_modifyitems(items):
    """Where `make test` runs each test: the training tests on the image's own library versions
    (.venv-image: container/base-image-versions.txt + container/requirements.txt), everything else on .venv.
    A training test that needs what torch 2.5.1 lacks on the CPU (FSDP2) says `newer_stack`; one that must
    hold on both says both. Then the longest files first (LONGEST_FILES)."""
    training = REPO_ROOT / "tests" / "training"
    for item in items:
        if item.get_closest_marker("image_stack") or item.get_closest_marker("newer_stack"):
            continue
        item.add_marker(pytest.mark.image_stack if training in item.path.parents else pytest.mark.newer_stack)
    items.sort(key=start_order)


def start_order(item: pytest.Item) -> int:
    """An item's file's place in LONGEST_FILES, after all of them if unlisted (the sort is stable)."""
    path = item.path.relative_to(REPO_ROOT).as_posix()
    return LONGEST_FILES.index(path) if path in LONGEST_FILES else len(LONGEST_FILES)


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def default_config_data() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG.read_text())


@pytest.fixture
def make_settings() -> Callable[..., Any]:
    """Settings from config/default.yaml with nested overrides applied (keys set to None are kept as None)."""
    from trainstack.config_loading import parse_settings

    def build(overrides: dict[str, Any] | None = None):
        return parse_settings(
            deep_merge(default_config_data(), overrides or {}), NO_ENV, source="test config"
        )

    return build


def synthesize(settings, outdir: Path | None = None):
    """Build and synthesize the whole app; returns (stacks, cloud assembly)."""
    import aws_cdk as cdk

    from stacks.app_builder import build_app

    app = cdk.App(outdir=str(outdir) if outdir else None, context=CDK_CONTEXT)
    stacks = build_app(app, settings)
    return stacks, app.synth()


@pytest.fixture(scope="session", autouse=True)
def botocore_data_read_once() -> Iterator[None]:
    """Each test process reads and parses botocore's data files once. moto gives every mock_aws block a
    new default boto3 session, whose new loader read the service models again (SageMaker's is megabytes
    of JSON; with the endpoints file, a third of an emulator test's CPU time). A session already hands
    the same loaded data to all of its clients, which only read it; here every session shares it."""
    from botocore.loaders import Loader

    def shared(load: Callable[..., Any]) -> Callable[..., Any]:
        loaded: dict[tuple, Any] = {}

        def load_once(loader: Loader, *arguments: Any, **named: Any) -> Any:
            key = (tuple(loader.search_paths), *arguments, *sorted(named.items()))
            if key not in loaded:
                loaded[key] = load(loader, *arguments, **named)
            return loaded[key]

        return load_once

    # load_service_model adds the model's extras to what load_data_with_path loaded: both are shared, so
    # the extras are added once.
    with (
        mock.patch.object(Loader, "load_data_with_path", shared(Loader.load_data_with_path)),
        mock.patch.object(Loader, "load_service_model", shared(Loader.load_service_model)),
    ):
        yield


@pytest.fixture(scope="session")
def synthesized_directory(tmp_path_factory) -> Callable[[Any], Path]:
    """synthesized_directory(settings) -> the directory of the settings' synthesized app (cdk.out), made
    once per test session however many files and workers ask for the same settings: the per-store and
    governance modes are read by the IAM, Control Tower and cfn-lint checks of several files, which
    `make test` deals to different workers. Keyed by the settings' JSON, in the session's temp root that
    every worker shares (the code cannot change during a session); a worker waits for another that is
    synthesizing the same app. For checks that read the templates only: the stacks are not kept."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp is a folder of the session's
    cache = root / "synthesized"
    cache.mkdir(exist_ok=True)

    def get(settings) -> Path:
        key = hashlib.sha256(settings.model_dump_json().encode()).hexdigest()[:20]
        directory = cache / key
        with (cache / f"{key}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not directory.exists():
                partial = cache / f"{key}.partial"
                shutil.rmtree(partial, ignore_errors=True)
                synthesize(settings, partial)
                partial.rename(directory)  # whole or absent: a failed synth leaves nothing to read
        return directory

    return get


@pytest.fixture(scope="session")
def default_app(tmp_path_factory):
    """The default config's app, synthesized once per test process (synth is slow: jsii + node)."""
    from trainstack.config_loading import parse_settings

    settings = parse_settings(default_config_data(), NO_ENV, source=str(DEFAULT_CONFIG))
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("cdk.out"))
    return settings, stacks, assembly


TEAMS_CONFIG = REPO_ROOT / "config/examples/teams.yaml"


@pytest.fixture(scope="session")
def teams_app(tmp_path_factory):
    """config/examples/teams.yaml's app (two teams, queue mode, FSx, a registry), synthesized once per test
    process: (settings, stacks, cloud assembly)."""
    from trainstack.config_loading import load_settings

    settings = load_settings(str(TEAMS_CONFIG))
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("teams.cdk.out"))
    return settings, stacks, assembly


@pytest.fixture
def aws(monkeypatch):
    """moto's AWS in tests.aws_fixtures.REGION, running Step Functions executions, with test credentials;
    the CLI reads config/default.yaml unless the test sets $TRAINSTACK_CONFIG."""
    from moto import mock_aws

    import localaws.emulator  # noqa: F401  (adds the ListServiceQuotas moto lacks: the CLI's quota check)
    from tests.aws_fixtures import REGION

    for variable, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("TRAINSTACK_CONFIG", raising=False)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield
