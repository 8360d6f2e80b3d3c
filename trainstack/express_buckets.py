"""The s3-express store's directory buckets (S3 Express One Zone): one per namespace whose profiles use it.

Why one per team: s3express:CreateSession authorizes a session on a whole directory bucket, and the session
then authorizes every object call in it; the Service Authorization Reference (S3 Express) lists `bucket` as
CreateSession's only required resource type, with no object or prefix ARN. So a bucket shared by two teams
would open each team's checkpoints to the other; a bucket per team keeps docs/teams.md's isolation.

Names follow S3's directory bucket naming rules (S3 user guide, "Directory bucket naming rules"):
`<base name>--<zone id>--x-s3`, 3 to 63 characters in all, lowercase letters, digits and hyphens, unique
within the zone (so the base name holds the account), and not starting with `xn--`, `sthree-` or
`amzn-s3-demo-`. The zone is the training AZ by id: S3 names a directory bucket's zone by AZ id, and an AZ
name maps to different ids in different accounts (EC2 user guide, "AZ IDs"), which synth cannot look up
without credentials (the network stack never looks AZs up), so the config must name it by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainstack.teams import namespace

EXPRESS_STORE = "s3-express"
NAME_MAX_LENGTH = 63
RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")


@dataclass(frozen=True)
class ExpressBuckets:
    """What the storage stack builds: the zone (an AZ id) and, by namespace, each directory bucket's name."""

    zone_id: str | None
    names: dict[str, str]


def bucket_name(space: str, account: str, zone_id: str) -> str:
    """The directory bucket of namespace `space`: `<namespace>-ckpt-<account>--<zone id>--x-s3`."""
    return f"{space}-ckpt-{account}--{zone_id}--x-s3"


def namespaces_using_express(settings: Any) -> list[str]:
    """The namespaces (the project, or with teams `<project>-<team>`) that run a profile on s3-express."""
    express = {profile.name for profile in settings.profiles if profile.checkpoint_store == EXPRESS_STORE}
    if not settings.teams:
        return [settings.project] if express else []
    return [namespace(settings.project, team.name) for team in settings.teams if express & set(team.profiles)]


def express_buckets(settings: Any) -> ExpressBuckets:
    """The directory buckets `settings` needs (none when no profile uses s3-express)."""
    zone = settings.availability_zone_id
    return ExpressBuckets(
        zone,
        {space: bucket_name(space, settings.account, zone) for space in namespaces_using_express(settings)},
    )


def check_express_buckets(settings: Any) -> Any:
    """Settings' after-validator: s3-express needs the training AZ by id and bucket names S3 accepts (one
    sentence naming the field if not)."""
    for index, profile in enumerate(settings.profiles):
        if profile.checkpoint_store == EXPRESS_STORE and settings.availability_zone_id is None:
            raise ValueError(
                f"profiles.{index}.checkpoint_store: s3-express needs the training AZ by id "
                f"(availability_zone_id, like use1-az4, instead of availability_zone "
                f"{settings.availability_zone}): S3 names a directory bucket's zone by AZ id"
            )
    for name in express_buckets(settings).names.values():
        if len(name) > NAME_MAX_LENGTH or name.startswith(RESERVED_PREFIXES):
            raise ValueError(
                f"project: the s3-express directory bucket {name} is not a name S3 accepts "
                f"({len(name)} characters, at most {NAME_MAX_LENGTH}, not starting with "
                f"{', '.join(RESERVED_PREFIXES)}); shorten the project's or the team's name"
            )
    return settings
