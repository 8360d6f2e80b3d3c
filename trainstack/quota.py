"""SageMaker's quota refusal (ResourceLimitExceeded), read as the pipeline and the CLI need it.

SageMaker refuses CreateTrainingJob over an account quota with (tests/faults/quota_texts.yaml has the
texts and their sources):

    The account-level service limit 'ml.p3.8xlarge for training job usage' is 2 Instances, with
    current utilization of 3 Instances and a request delta of 1 Instances.

- busy: the request alone fits the limit (delta <= limit); other jobs hold the quota, and it clears
  when they end. The pipeline waits for it like capacity.
- exceeded: the request alone is above the limit (delta > limit); only a quota increase helps.

QUOTA_PATTERN is the one regex: `parse` applies it in Python, `quota_expression` as the JSONata the
attempt machines run. A text it does not match (another wording, or no message) is treated as exceeded,
as before this reading existed, and `parse` returns None so that callers can say the wording was not
recognised.

Service Quotas names the same quotas (`<type> for training job usage`, service code `sagemaker`):
`quota_name` builds the name `trainstack plan` and `start` look up (trainstack/service_quotas.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainstack.jsonata_regex import regex_literal

# Searched anywhere in the text: Step Functions adds "(Service: SageMaker, Status Code: 400, Request ID:
# ...)" to the Cause, AWS Batch "Received status from SageMaker:" before it.
# Any white space between words: texts copied from a terminal wrap lines (zenml-io/zenml#847).
QUOTA_PATTERN = (
    r"service\s+limit\s+'([^']+)'\s+is\s+(\d+)\s+Instances?,\s+with\s+current\s+utilization\s+of\s+"
    r"(\d+)\s+Instances?\s+and\s+a\s+request\s+delta\s+of\s+(\d+)\s+Instances?"
)
_COMPILED = re.compile(QUOTA_PATTERN)
# A per-type quota's name: the instance type, then what it counts (training, spot training, ...).
INSTANCE_TYPE_PATTERN = r"^(ml\.[a-z0-9-]+\.[a-z0-9]+)\s"
SERVICE_CODE = "sagemaker"


@dataclass(frozen=True)
class QuotaRefusal:
    name: str  # the quota, as SageMaker and Service Quotas name it
    instance_type: str | None  # None for account-wide quotas ("Number of instances across all ...")
    limit: int
    utilization: int
    delta: int

    @property
    def busy(self) -> bool:
        """The request alone fits the limit: other jobs hold the quota, and it clears when they end."""
        return self.delta <= self.limit


def parse(message: str | None) -> QuotaRefusal | None:
    """The quota SageMaker's refusal names, or None when its wording is not the one known."""
    found = _COMPILED.search(message or "")
    if found is None:
        return None
    name = found.group(1)
    instance_type = re.match(INSTANCE_TYPE_PATTERN, name)
    return QuotaRefusal(
        name=name,
        instance_type=instance_type.group(1) if instance_type else None,
        limit=int(found.group(2)),
        utilization=int(found.group(3)),
        delta=int(found.group(4)),
    )


def quota_name(instance_type: str, *, spot: bool = False) -> str:
    """The Service Quotas name of a type's training quota (the name SageMaker's refusal quotes)."""
    return f"{instance_type} for {'spot ' if spot else ''}training job usage"


def quota_expression(message: str) -> str:
    """JSONata: {"name", "instanceType", "limit", "utilization", "delta", "busy"} of the refusal that the
    JSONata expression `message` yields, or null when the wording is not the one known (as `parse`)."""
    return (
        f'($q := $match({message} ? {message} : "", {regex_literal(QUOTA_PATTERN)})[0]; '
        "$exists($q) ? ($n := $q.groups[0]; $t := $match($n, "
        f"{regex_literal(INSTANCE_TYPE_PATTERN)})[0]; "
        '{"name": $n, "instanceType": $exists($t) ? $t.groups[0] : null, '
        '"limit": $number($q.groups[1]), "utilization": $number($q.groups[2]), '
        '"delta": $number($q.groups[3]), "busy": $number($q.groups[3]) <= $number($q.groups[1])}) : null)'
    )


def describe(refusal: QuotaRefusal | dict) -> str:
    """One clause for the CLI and the report: `quota 'ml.p5.48xlarge for training job usage' busy (4 of 4
    instances in use, 2 requested)`."""
    values = refusal if isinstance(refusal, dict) else refusal.__dict__ | {"busy": refusal.busy}
    if values["busy"]:
        return (
            f"quota '{values['name']}' busy ({values['utilization']} of {values['limit']} instances in use, "
            f"{values['delta']} requested)"
        )
    return f"quota '{values['name']}' of {values['limit']} instances is below the {values['delta']} requested"
