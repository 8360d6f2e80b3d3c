"""What a deployed app keeps from its earlier configs (the `migrations:` section; README, "Migrations").

A `cdk deploy` knows only the new templates, and CloudFormation cannot create a resource of a fixed name
again while a retained one of that name exists ("already exists"), nor turn Object Lock on for a bucket it
created without it but by replacing the bucket (the top-level ObjectLockEnabled causes a replacement:
the resource specification the CDK CLI ships). So the few facts of a deployment's past that its next
template depends on are written down here, once, and stay:

- `keep_run_names_table`: queue mode was on once. Its run-names table (retained, named
  `<project>-run-names`, holding every queued run's claimed name) stays in the template while queue mode is
  off, so that turning it on again finds the table and the names used before stay used.
- `keep_model_package_groups`: model package groups (retained, named `<namespace>-<profile>`, holding the
  registered versions) that stay in the template although no profile registers into them now, so that a
  registry block added again finds its group with every version it had.
- `keep_trigger_table`: retrain_on_new_data was on once. Its state table (retained, named
  `<project>-retrain-triggers`, holding the last dataset hash each profile trained on) stays while the
  trigger is off, so that turning it on again finds it (and retrains on no data it trained on before).
- `keep_team_trigger_tables`: with teams, the teams whose `retrain_on_new_data` was on once. Each one's state
  table (retained, named `<project>-<team>-retrain-triggers`) stays while its trigger is off, as
  `keep_trigger_table` does without teams.
- `keep_image_repository`: the image was built once (the `<project>-training` ECR repository, retained, holds
  the images past jobs ran). With `image.uri` set the repository stays in the template, so that building
  the image again finds it.
- `keep_split_fsx_links`: the file system was linked by release 0.5.0, which put the dataset's data
  repository association at `/dataset` and a checkpoint association at `/checkpoints`, without the fsx
  checkpoint store too. Those two links stay (same logical ids, paths and S3 locations): the one association
  at `/` of every other release cannot be created while they exist (CreateDataRepositoryAssociation: `/`
  allows one association only; CloudFormation creates before it deletes), and a SCRATCH_2 file system would
  be replaced to get its ImportPath back. docs/upgrading.md says when to set it; `make deploy` refuses the
  upgrade of such a deployment without it.
- `object_lock_in_place`: the buckets were created without Object Lock (`compliance: none`), and
  `compliance: control-tower` turns it on through their ObjectLockConfiguration, which S3 and
  CloudFormation change in place (S3 User Guide, "Enable Object Lock on an existing S3 bucket";
  CloudFormation, AWS::S3::Bucket ObjectLockConfiguration: "Update requires: No interruption").
"""

from __future__ import annotations

from typing import Annotated

from trainstack.base import StrictModel, matching

# A model package group's name as trainstack makes it: `<namespace>-<profile>` (trainstack/registry.py).
GROUP_NAME_PATTERN = r"^[a-z][a-z0-9-]{2,62}$"


class MigrationSettings(StrictModel):
    keep_run_names_table: bool = False
    keep_model_package_groups: list[
        Annotated[
            str,
            matching(
                GROUP_NAME_PATTERN,
                "a model package group's name as trainstack made it, <project>-<profile> or "
                "<project>-<team>-<profile>",
            ),
        ]
    ] = []
    object_lock_in_place: bool = False
    keep_split_fsx_links: bool = False
    keep_image_repository: bool = False
    keep_trigger_table: bool = False
    keep_team_trigger_tables: list[str] = []


def kept_groups_of(kept: list[str], namespace: str, namespaces: list[str]) -> list[str]:
    """The kept groups one pipeline holds: those named `<its namespace>-<profile>` and no longer namespace's
    (with teams, `trainstack-research-x` is team research's, not the project's)."""
    longer = [other for other in namespaces if other != namespace and other.startswith(f"{namespace}-")]
    return [
        group
        for group in kept
        if group.startswith(f"{namespace}-") and not any(group.startswith(f"{other}-") for other in longer)
    ]


def check_migrations(settings) -> object:
    """Settings' after-validator: each kept group is of a pipeline of this config (one sentence if not)."""
    from trainstack.teams import namespace

    namespaces = [namespace(settings.project, team.name) for team in settings.teams] or [settings.project]
    if settings.teams and settings.migrations.keep_trigger_table:
        raise ValueError(
            "migrations.keep_trigger_table keeps the trigger table of a config without teams; with teams, "
            "name the teams whose trigger was on in migrations.keep_team_trigger_tables (the pre-teams "
            "table stays in the account, retained)"
        )
    kept_tables, team_names = settings.migrations.keep_team_trigger_tables, [t.name for t in settings.teams]
    if kept_tables and not team_names:
        raise ValueError(
            "migrations.keep_team_trigger_tables names teams and this config has none; without teams, "
            "migrations.keep_trigger_table: true keeps the trigger table"
        )
    if strangers := [name for name in kept_tables if name not in team_names]:
        raise ValueError(
            f"migrations.keep_team_trigger_tables: '{strangers[0]}' is not a team of this config; name one "
            f"of {', '.join(team_names)}"
        )
    for group in settings.migrations.keep_model_package_groups:
        if not any(group.startswith(f"{each}-") for each in namespaces):
            raise ValueError(
                f"migrations.keep_model_package_groups: '{group}' is no group of this config's pipelines; "
                f"name one starting with {' or '.join(f'{each}-' for each in namespaces)}"
            )
    return settings
