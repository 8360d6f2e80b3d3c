"""A bad config stops `trainstack check-config` and `cdk synth` (what `make synth CONFIG=...` runs) with one
sentence naming the field, a non-zero exit and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, deep_merge, default_config_data

CDK_CLI = REPO_ROOT / "node_modules" / ".bin" / "cdk"

# name -> (overrides of config/default.yaml, the message after "trainstack: <file>: ")
BAD_CONFIGS = {
    "unknown_key": (
        {"network": {"egres": "nat"}},
        "network.egres: unknown key; allowed keys here: egress, existing, vpc_cidr.",
    ),
    "az_not_in_region": (
        {"availability_zone": "eu-west-1a"},
        "availability_zone 'eu-west-1a' is not in region 'us-east-1'; "
        "use an AZ of that region such as us-east-1a.",
    ),
    "impossible_fsx_need": (
        {"dataset": {"size_gib": 1000}, "fsx": {"throughput_mbps": None, "epoch_seconds": 0.001}},
        "fsx.epoch_seconds: reading 1,000 GiB every 0.001 s needs 1,073,741,824 MB/s, "
        "more than one file system",
    ),
    "no_profiles": (
        {"profiles": []},
        "profiles: give at least one training profile (see config/default.yaml).",
    ),
    "unknown_region": (
        {"region": "us-east-9", "availability_zone": None, "availability_zone_id": "use1-az4"},
        "region: 'us-east-9' is not an AWS Region known to botocore",
    ),
    "fallback_type_cannot_hold_the_model": (
        {
            "profiles": [
                {
                    "name": "llama-7b-smp",
                    "strategy": "smp",
                    "instance_preferences": [
                        {"instance_type": "ml.p5.48xlarge", "instance_count": 2},
                        {"instance_type": "ml.g5.48xlarge", "instance_count": 2},
                    ],
                    "smp": {"hybrid_shard_degree": 8},
                    "hyperparameters": {
                        "model_preset": "7b",
                        "seq_len": "4096",
                        "micro_batch_size": "2",
                        "activation_checkpointing": "true",
                    },
                }
            ]
        },
        "profiles.0: profile llama-7b-smp cannot fit model 7b on instance_preferences.1 (ml.g5.48xlarge): "
        "it needs 25.7 GiB per GPU and the GPU has 22.5 GiB (short 3.2 GiB); smallest change that fits: "
        "shard wider: smp.hybrid_shard_degree 16.",
    ),
    "boundary_not_a_policy_arn": (
        {"iam": {"permissions_boundary": "PlatformBoundary"}},
        "iam.permissions_boundary: 'PlatformBoundary' is not an IAM managed policy ARN like "
        "arn:aws:iam::111111111111:policy/PlatformBoundary.",
    ),
    "control_tower_without_access_logs_bucket": (
        {"compliance": "control-tower"},
        "compliance: control-tower needs access_logs_bucket, the name of an existing bucket",
    ),
    "malformed_cidr": (
        {"network": {"vpc_cidr": "10.20.0.0/33"}},
        "network.vpc_cidr: '10.20.0.0/33' is not an IPv4 CIDR block such as 10.20.0.0/16.",
    ),
}


@pytest.fixture(params=sorted(BAD_CONFIGS))
def bad_config(request, tmp_path) -> tuple[Path, str]:
    overrides, message = BAD_CONFIGS[request.param]
    path = tmp_path / f"{request.param}.yaml"
    path.write_text(yaml.safe_dump(deep_merge(default_config_data(), overrides)))
    return path, f"trainstack: {path}: {message}"


def without_account_variables() -> dict[str, str]:
    """The machine's CDK_DEFAULT_* must not mask what the file says (the AZ case depends on its region)."""
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION")
    }


def cdk_synth(config: str | Path, outdir: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    """`cdk synth -c config=CONFIG` as `make synth` runs it, offline, into outdir."""
    assert CDK_CLI.exists(), "the CDK CLI is missing: `make test` installs it into node_modules"
    return subprocess.run(
        [str(CDK_CLI), "synth", "--quiet", "--no-notices", "-c", f"config={config}", "-o", str(outdir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=environment
        | {
            # app.py runs as `python3 app.py`: this interpreter's venv must come first.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "CDK_DISABLE_VERSION_CHECK": "1",
        },
        check=False,
        timeout=600,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("trainstack: ")]
    assert line.startswith(expected)
    assert line.endswith(".")


def test_check_config_names_the_field(bad_config):
    path, expected = bad_config
    result = subprocess.run(
        [sys.executable, "-m", "trainstack.cli", "check-config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=without_account_variables(),
        check=False,
    )
    assert_one_line_error(result, expected)
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0]  # exactly one line


def test_cdk_synth_stops_with_the_same_sentence(bad_config, tmp_path):
    path, expected = bad_config
    result = cdk_synth(path, tmp_path / "cdk.out", without_account_variables())
    assert_one_line_error(result, expected)
    assert not list((tmp_path / "cdk.out").glob("*.template.json"))


def test_a_file_region_wins_over_the_cdk_clis_default_region(tmp_path):
    """With no AWS config the CDK CLI sets CDK_DEFAULT_REGION=us-east-1; the eu-west-1 example must still
    synthesize offline, every stack in eu-west-1, and print its FSx plan."""
    home = tmp_path / "home"  # no ~/.aws: the CLI falls back to us-east-1 itself
    home.mkdir()
    environment = {
        key: value for key, value in without_account_variables().items() if not key.startswith("AWS_")
    }
    outdir = tmp_path / "cdk.out"
    result = cdk_synth("config/examples/eu-west-1.yaml", outdir, environment | {"HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert "trainstack: FSx for Lustre: " in result.stderr and "/month" in result.stderr
    # Counted from the templates just written, in the file's Region; FSx has no eu-west-1 price: no total.
    assert "trainstack: idle monthly cost in eu-west-1 (eu-west-1 list prices of " in result.stderr
    assert "trainstack:   5 interface endpoint-AZs x 730 h at $0.011/h: $40.15" in result.stderr.splitlines()
    manifest = json.loads((outdir / "manifest.json").read_text())
    stacks = {
        name: artifact["environment"]
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }
    assert set(stacks) == {f"trainstack-eu-{part}" for part in ("network", "storage", "image", "pipeline")}
    assert set(stacks.values()) == {"aws://111111111111/eu-west-1"}
