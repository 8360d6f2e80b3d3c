"""`trainstack size-fsx`: JSON for machines, a table for people, one-sentence errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainstack.cli import main
from trainstack.prices import FSX_LUSTRE_PRICES


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["size-fsx", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_for_the_sagemaker_example_in_gib(capsys):
    code, out, err = run_cli(capsys, "--dataset-gib", "100", "--epoch-seconds", "30", "--json")
    assert (code, err) == (0, "")
    plan = json.loads(out)
    assert {
        key: plan[key] for key in ("deployment_type", "storage_capacity_gib", "per_unit_storage_throughput")
    } == {
        "deployment_type": "SCRATCH_2",
        "storage_capacity_gib": 19200,
        "per_unit_storage_throughput": None,
    }
    assert (plan["throughput_mbps"], plan["monthly_cost_usd"]) == (3750.0, 2688.0)
    assert plan["required_mbps"] == pytest.approx(100 * 2**30 / 1e6 / 30)
    assert (plan["price_region"], plan["price_source"]) == (
        "us-east-1",
        "https://aws.amazon.com/fsx/lustre/pricing/",
    )


def test_json_persistent_type_has_its_per_unit_throughput(capsys):
    code, out, _ = run_cli(capsys, "--dataset-gib", "1000", "--throughput-mbps", "1000", "--json")
    plan = json.loads(out)
    assert code == 0
    assert (plan["deployment_type"], plan["per_unit_storage_throughput"], plan["storage_capacity_gib"]) == (
        "PERSISTENT_2",
        1000,
        1200,
    )
    assert plan["monthly_cost_usd"] == 720.0


def test_deployment_type_flag_restricts_the_choice(capsys):
    code, out, _ = run_cli(
        capsys,
        "--dataset-gib",
        "1000",
        "--throughput-mbps",
        "1000",
        "--json",
        "--deployment-type",
        "SCRATCH_2",
    )
    plan = json.loads(out)
    assert (code, plan["deployment_type"], plan["storage_capacity_gib"]) == (0, "SCRATCH_2", 7200)


def test_table_for_people(capsys):
    code, out, _ = run_cli(capsys, "--dataset-gib", "100", "--epoch-seconds", "30")
    assert code == 0
    rows = dict(line.split("  ", 1) for line in out.splitlines())
    rows = {label.strip(): value.strip() for label, value in rows.items()}
    assert rows["need"] == "100 GiB read every 30 s = 3,579 MB/s"
    assert rows["deployment type"] == "SCRATCH_2"
    assert rows["storage capacity"] == "19,200 GiB (dataset 100 GiB)"
    assert rows["baseline throughput"] == "3,750 MB/s"
    assert rows["monthly cost"].startswith("$2,688.00 (us-east-1 prices of ")
    assert "note" not in rows


def test_table_warns_above_the_default_account_quota_and_offers_the_cheapest_plan_under_it(capsys):
    # SCRATCH_2 needs 103,200 GiB to read 20,000 MB/s; PERSISTENT_2 at 250 MB/s/TiB fits in 100,800 GiB.
    _, out, _ = run_cli(capsys, "--dataset-gib", "100000", "--throughput-mbps", "20000")
    rows = dict(line.split("  ", 1) for line in out.splitlines())
    rows = {label.strip(): value.strip() for label, value in rows.items()}
    assert rows["storage capacity"] == "103,200 GiB (dataset 100,000 GiB)"
    assert rows["note"].startswith("103,200 GiB is above the default 100,800 GiB Lustre storage quota")
    assert rows["note"].endswith(
        "or take the cheapest plan under it: PERSISTENT_2 at 250 MB/s/TiB, 100,800 GiB, "
        f"24,609 MB/s baseline, $21,168.00/month (us-east-1 prices of {FSX_LUSTRE_PRICES.as_of})."
    )


def test_json_carries_the_plan_within_the_default_quota(capsys):
    _, out, _ = run_cli(capsys, "--dataset-gib", "100000", "--throughput-mbps", "20000", "--json")
    plan = json.loads(out)
    assert (plan["storage_capacity_gib"], plan["within_default_quota"]["storage_capacity_gib"]) == (
        103200,
        100800,
    )
    _, out, _ = run_cli(capsys, "--dataset-gib", "1000", "--throughput-mbps", "1000", "--json")
    assert "within_default_quota" not in json.loads(out)


def test_no_plan_under_the_quota_is_said_so(capsys):
    _, out, _ = run_cli(capsys, "--dataset-gib", "200000", "--throughput-mbps", "1000")
    assert "above the default 100,800 GiB Lustre storage quota" in out
    assert "no plan for this need fits under it" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--throughput-mbps", "5"],
            "--dataset-gib is required: give the dataset size in GiB, a number above 0.",
        ),
        (
            ["--dataset-gib", "100"],
            "give exactly one of --throughput-mbps (MB/s the jobs read) or --epoch-seconds",
        ),
        (["--dataset-gib", "1", "--throughput-mbps", "1", "--epoch-seconds", "1"], "give exactly one of"),
        (["--dataset-gib", "lots", "--throughput-mbps", "5"], "--dataset-gib: 'lots' is not a size in GiB"),
        (
            ["--dataset-gib", "1", "--epoch-seconds", "-3"],
            "--epoch-seconds: '-3' is not a duration in seconds",
        ),
        (
            ["--dataset-gib", "1", "--throughput-mbps", "9", "--deployment-type", "PERSISTENT_1"],
            "--deployment-type: 'PERSISTENT_1' is not a planned deployment type; "
            "use SCRATCH_2 or PERSISTENT_2.",
        ),
        (
            ["--dataset-gib", "100", "--throughput-mbps", "5000000"],
            "--throughput-mbps: 5,000,000 MB/s is more than one file system "
            "of at most 1,000,000 GiB can give",
        ),
        (["--dataset-gib", "999000", "--throughput-mbps", "1"], "--dataset-gib: 999,000 GiB does not fit"),
    ],
)
def test_bad_input_is_one_sentence_on_stderr_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("trainstack size-fsx: ") and err.endswith(".\n") and err.count("\n") == 1
    assert message in err


def test_console_entry_point_exit_codes_and_streams():
    command = [sys.executable, "-m", "trainstack.cli", "size-fsx", "--dataset-gib", "100"]
    ok = subprocess.run([*command, "--throughput-mbps", "500", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["deployment_type"] == "PERSISTENT_2"
    bad = subprocess.run([*command, "--throughput-mbps", "5000000"], capture_output=True, text=True)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert "--throughput-mbps: 5,000,000 MB/s" in bad.stderr
