"""The rule for grants across a deploy (docs/pipeline.md, "What a deploy does to runs in flight"): an
execution in flight keeps its release's definition but calls AWS with its role's current policies, which
every version of the machine shares, so each machine's role in this release allows every action the previous
release's role allowed. Checked against the newest release kept under tests/upgrades/releases/ (its
synthesized templates, default config). Actions only: a narrower resource is not detected here.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
from pathlib import Path
from typing import Any

from tests.infra.templates import resources

RELEASES = Path(__file__).parents[1] / "upgrades" / "releases"
PIPELINE_TEMPLATE = Path("default", "trainstack-pipeline.template.json.gz")
# Actions the previous release's definitions call that this release dropped on purpose, by release and
# machine. Release 19fc479's registration machine ran its evaluation jobs and listed the dataset itself;
# keeping those grants would let every registration machine create training jobs past the attempt
# machine's conditions (tests/iam/test_denied_calls.py, test_team_isolation.py). 19fc479 starts its inner
# machines by plain ARN, so its runs in flight are drained before that upgrade anyway (docs/pipeline.md).
DROPPED = {
    "19fc479": {
        "trainstack-pipeline-registration": [
            "iam:passrole",
            "s3:listbucket",
            "sagemaker:addtags",
            "sagemaker:createtrainingjob",
            "sagemaker:describetrainingjob",
        ]
    }
}


def previous_release() -> tuple[str, dict[str, Any]]:
    """(commit, pipeline template) of the newest kept release."""
    kept = [path.parents[1] for path in RELEASES.glob(f"*/{PIPELINE_TEMPLATE.as_posix()}")]
    newest = max(kept, key=lambda release: json.loads((release / "release.json").read_text())["date"])
    return newest.name, json.loads(gzip.decompress((newest / PIPELINE_TEMPLATE).read_bytes()))


def allowed_actions(template: dict[str, Any]) -> dict[str, set[str]]:
    """The actions each state machine's role is allowed (lower case: IAM actions are case-insensitive), by
    StateMachineName."""
    machine_of_role = {
        body["Properties"]["RoleArn"]["Fn::GetAtt"][0]: body["Properties"]["StateMachineName"]
        for body in resources(template, "AWS::StepFunctions::StateMachine").values()
    }
    actions: dict[str, set[str]] = {machine: set() for machine in machine_of_role.values()}
    for policy in resources(template, "AWS::IAM::Policy").values():
        machines = [
            machine_of_role[role["Ref"]]
            for role in policy["Properties"].get("Roles", [])
            if isinstance(role, dict) and role.get("Ref") in machine_of_role
        ]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow":
                named = statement["Action"]
                for machine in machines:
                    actions[machine].update(a.lower() for a in ([named] if isinstance(named, str) else named))
    return actions


def missing_actions(previous: dict[str, set[str]], current: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per machine of both releases, the previous release's actions no current grant covers."""
    return {
        machine: sorted(
            action
            for action in actions
            if not any(fnmatch.fnmatchcase(action, grant) for grant in current[machine])
        )
        for machine, actions in previous.items()
        if machine in current
    }


def test_every_role_still_allows_what_the_previous_release_calls(pipeline):
    release, template = previous_release()
    missing = missing_actions(allowed_actions(template), allowed_actions(pipeline.template))
    assert missing, "no machine of the previous release is in this one"
    missing = {machine: actions for machine, actions in missing.items() if actions}
    assert missing == DROPPED.get(release, {}), (
        f"release {release}'s runs in flight would be denied: {missing}"
    )


def test_a_grant_the_previous_release_used_and_this_one_dropped_is_named():
    previous = {"trainstack-pipeline-registration": {"sagemaker:createtrainingjob", "states:startexecution"}}
    current = {"trainstack-pipeline-registration": {"states:*"}}
    assert missing_actions(previous, current) == {
        "trainstack-pipeline-registration": ["sagemaker:createtrainingjob"]
    }
