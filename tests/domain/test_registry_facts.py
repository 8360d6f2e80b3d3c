"""trainstack.registry: the code version baked into the image, and the config hash in the lineage."""

from __future__ import annotations

import subprocess

from trainstack.registry import UNKNOWN_CODE_VERSION, code_version, config_hash


def git(repository, *arguments: str) -> str:
    command = [
        "git",
        "-C",
        str(repository),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        *arguments,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_the_code_version_is_the_revision_marked_dirty_with_uncommitted_changes(tmp_path):
    assert code_version(tmp_path) == UNKNOWN_CODE_VERSION  # no git checkout
    git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text("print(1)\n")
    git(tmp_path, "add", "train.py")
    git(tmp_path, "commit", "-qm", "one")
    revision = git(tmp_path, "rev-parse", "HEAD")
    assert code_version(tmp_path) == revision
    (tmp_path / "train.py").write_text("print(2)\n")
    assert code_version(tmp_path) == f"{revision}-dirty"


def test_the_config_hash_changes_with_the_profile_and_only_with_it(settings):
    profile = settings.profile("small-torchrun")
    assert config_hash(profile) == config_hash(profile.model_copy())
    changed = profile.model_copy(update={"max_runtime_hours": 5})
    assert config_hash(changed) != config_hash(profile)
    assert len(config_hash(profile)) == 64


def test_the_report_states_a_team_evaluations_own_metric_where_no_loss_was_reported():
    """A team's evaluation entry point reports its metric only (evaluation_request.evaluation_metrics); the
    report used to fail on the missing loss."""
    from trainstack.model_versions import run_facts

    package = {"modelPackageArn": "arn:v/1", "decision": "Approved", "reason": "first version"}
    team = run_facts({**package, "evaluation": {"metric": 0.742188}})
    assert team["Evaluation"] == "the profile's metric 0.742188"
    product = run_facts(
        {**package, "evaluation": {"loss": 2.5, "perplexity": 12.18, "tokens": 4096, "metric": 2.5}}
    )
    assert product["Evaluation"] == "loss 2.5000, perplexity 12.18 over 4,096 tokens"
