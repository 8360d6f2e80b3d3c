"""IAM decisions for a batch of calls, from @cloud-copilot/iam-simulate run once per batch
(tests/iam/simulate.js): node starts slowly on a loaded machine, so every call of a test goes in one run."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT
from tests.iam.calls import Call

SIMULATE_JS = Path(__file__).with_name("simulate.js")
# The account the caller and the resources are in (the config's): same-account requests.
ALLOWED = "Allowed"


@dataclass(frozen=True)
class Decision:
    call: Call
    decision: str  # Allowed | ImplicitlyDenied | ExplicitlyDenied | Error
    blocked_by: tuple[str, ...]
    errors: Any

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOWED

    def explain(self) -> str:
        """One line: the call, the role, and what is missing."""
        call = self.call
        context = f" with {json.dumps(call.context, sort_keys=True)}" if call.context else ""
        if self.decision == "Error":
            message = self.errors.get("message") if isinstance(self.errors, dict) else self.errors
            if message == "must.use.wildcard":
                missing = f'{call.action} supports no resource types: call it on "*"'
            else:
                missing = f"the simulator rejected the request: {json.dumps(self.errors)[:300]}"
        elif "pb" in self.blocked_by:
            missing = f"its permissions boundary {call.role.boundary} does not allow it"
        elif self.decision == "ExplicitlyDenied":
            missing = "a Deny statement (identity, boundary or resource policy) matches it"
        elif self.blocked_by:
            missing = f"blocked by {', '.join(self.blocked_by)}"
        else:
            missing = f"no statement allows {call.action} on {call.resource}{context}"
        role = call.role.logical_id
        return f"DENIED {call.caller}: {call.action} on {call.resource} by role {role}: {missing}"


def simulate(
    calls: list[Call], boundaries: dict[str, dict[str, Any]] | None = None, account: str = ""
) -> tuple[list[Decision], float]:
    """Every call's decision and the node run's wall time in seconds. `boundaries`: boundary ARN -> its
    policy document (a boundary is the platform's policy, not in any template)."""
    boundaries = boundaries or {}
    requests = [_request(call, boundaries, account) for call in calls]
    started = time.monotonic()
    result = subprocess.run(
        ["node", str(SIMULATE_JS)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout)
    return [
        Decision(call, answer["decision"], tuple(answer.get("blockedBy", [])), answer.get("errors"))
        for call, answer in zip(calls, answers, strict=True)
    ], elapsed


def _request(call: Call, boundaries: dict[str, dict[str, Any]], account: str) -> dict[str, Any]:
    role = call.role
    request: dict[str, Any] = {
        "principal": role.arn,
        "action": call.action,
        "resource": call.resource,
        "account": account or role.arn.split(":")[4],
        "context": call.context,
        "identityPolicies": role.policies,
        "boundaryPolicies": [{"name": role.boundary, "policy": boundaries[role.boundary]}]
        if role.boundary
        else [],
    }
    if call.resource_policy is not None:
        request["resourcePolicy"] = call.resource_policy
    return request
