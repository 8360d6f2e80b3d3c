"""What the inner machines may be asked to run: the CreateTrainingJob request an attempt machine (direct or
queued) or the registration machine receives is checked, as its first state, against the table of what
the pipeline's profiles and resources allow; a request outside it ends the execution with the error
RequestRefused, its cause naming the field and the allowed value, before any CreateTrainingJob or
SubmitServiceJob.

Why: the inner machines take the whole request from their input, and anyone allowed to start them can
start them directly (Step Functions knows no caller identity inside an execution and has no resource
policies: DESIGN.md, round 6). The pipeline builds its requests from the same profiles and resources, so
its own attempts always pass. IAM enforces the same rules second where a condition key exists
(attempt_grants.py).

The table is baked into the definition from what the constructs are given (`runs`, `resources` with their
`${Name}` placeholders, the profiles), never from a global: one pipeline per team gets its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.request_locations import LOCATIONS, foreign_run_rules, location_rules
from trainstack.checkpoint_requests import checkpoint_prefix, direct_resume_prefixes
from trainstack.input_rules import NOT_NORMALIZED, S3_SCHEME
from trainstack.job_request import (
    PipelineResources,
    RunRequest,
    build_create_training_job_request,
    team_code_prefix,
)
from trainstack.jsonata_regex import regex_literal
from trainstack.pipeline_runs import PipelineRuns
from trainstack.planning.setups import instance_count_problem
from trainstack.profiles import MAX_RUNTIME_HOURS_LIMIT, Profile
from trainstack.teams import MAX_INSTANCE_COUNT

ERROR_REQUEST_REFUSED = "RequestRefused"


def largest_count(profile: Profile, queue_max: int | None, max_count: int = MAX_INSTANCE_COUNT) -> int:
    """The most instances a run of `profile` may ask for: its largest valid instanceCount up to `max_count`
    (the input rules integer>=1 and fits-profile; with teams, the team's cap), never below its own counts,
    within queue.max_instances in queue mode."""
    valid = next(
        (count for count in range(max_count, 0, -1) if instance_count_problem(profile, count) is None),
        0,
    )
    largest = max(valid, *(preference.instance_count for preference in profile.instance_preferences))
    return min(largest, queue_max) if queue_max else largest


def largest_counts(profiles: Sequence[Profile], queue_max: int | None, max_count: int) -> dict[str, int]:
    """By instance type: the most instances any profile naming it may ask for."""
    counts: dict[str, int] = {}
    for profile in profiles:
        largest = largest_count(profile, queue_max, max_count)
        for preference in profile.instance_preferences:
            counts[preference.instance_type] = max(counts.get(preference.instance_type, 0), largest)
    return counts


def longest_runtime_seconds(profiles: Sequence[Profile], limit_hours: float = MAX_RUNTIME_HOURS_LIMIT) -> int:
    """The longest MaxRuntimeInSeconds a run may ask for: maxRuntimeHours' upper bound of each profile, within
    `limit_hours` (with teams, the team's max_runtime_hours)."""
    return max(
        round(
            min(profile.max_wait_hours if profile.managed_spot else MAX_RUNTIME_HOURS_LIMIT, limit_hours)
            * 3600
        )
        for profile in profiles
    )


def request_fields(profiles: Sequence[Profile], resources: PipelineResources) -> list[str]:
    """The top-level members the pipeline's requests hold (a resumed run's included): no other is allowed,
    so a request cannot add a destination the table knows nothing of (ProfilerConfig, DebugHookConfig...)."""
    fields: set[str] = set()
    for profile in profiles:
        run = RunRequest(
            profile=profile.name, run_name=f"{resources.job_name_prefix}run", resume_from="s3://x/"
        )
        fields |= set(build_create_training_job_request(profile, resources, run, 1, "execution"))
    return sorted(fields)


def evaluation_sets(profiles: Sequence[Profile], resources: PipelineResources) -> list[str]:
    """The S3 URIs of the profiles' evaluation sets (their `registry.evaluation_prefix`)."""
    prefixes = sorted({p.registry.evaluation_prefix for p in profiles if p.registry is not None})
    return [f"s3://{resources.dataset_bucket}/{prefix}" for prefix in prefixes]


def allowed_requests(
    runs: PipelineRuns, resources: PipelineResources, profiles: Sequence[Profile] | None = None
) -> dict[str, Any]:
    """The table: `resources` with their placeholders, `profiles` (default: every profile of `runs`)."""
    profiles = runs.profiles if profiles is None else profiles
    prefix = resources.job_name_prefix
    checkpoints = f"s3://{resources.checkpoint_bucket}/{prefix}"
    artifacts = f"s3://{resources.artifact_bucket}/{prefix}"
    # The s3-express store's directory bucket (the team's own), where its profiles use one.
    express = resources.express_checkpoint_bucket
    express_checkpoints = f"s3://{express}/{prefix}" if express is not None else None
    queue = runs.queue
    # The dataset directory and the fsx store's checkpoint directory: the pipeline's, with teams the team's.
    directories = (resources.file_system_directory_path, resources.checkpoint_file_system_path)
    file_system = (
        {
            "id": resources.file_system_id,
            "directoryPaths": [d.rstrip("/") for d in directories if d is not None],
        }
        if resources.file_system_id is not None and resources.file_system_directory_path is not None
        else None
    )
    return {
        "fields": request_fields(profiles, resources),
        "roleArn": resources.role_arn,
        "image": resources.image_uri,
        "subnets": list(resources.subnet_ids),
        "securityGroups": list(resources.security_group_ids),
        "counts": largest_counts(
            profiles, queue.max_instances if queue.enabled else None, runs.limits.max_instance_count
        ),
        "maxRuntimeSeconds": longest_runtime_seconds(profiles, runs.limits.max_runtime_hours),
        "jobNamePrefix": prefix,
        "checkpoints": checkpoints,
        "expressCheckpoints": express_checkpoints,
        # Where train.py may checkpoint and resume from itself (HyperParameters checkpoint_dir, resume_from):
        # the profiles' stores' run prefixes (job_request.checkpoint_prefix, direct_resume_prefixes).
        "checkpointDirs": sorted({f"{checkpoint_prefix(p, resources)}{prefix}" for p in profiles}),
        "resumeSources": sorted(
            {
                f"{source}{each}"
                for p in profiles
                for source in direct_resume_prefixes(p, resources)
                for each in (prefix, *runs.inherited_prefixes)
            }
        ),
        "artifacts": artifacts,
        # The team's own code (trainstack.team_code): a run's sagemaker_submit_directory lies here.
        "code": team_code_prefix(resources),
        # A channel reads the dataset, the profiles' evaluation sets (an evaluation job, which runs in the
        # attempt machine), or what a run of this project wrote (resumeFrom, a model).
        "channels": [
            f"s3://{resources.dataset_bucket}/{resources.dataset_prefix}",
            *evaluation_sets(profiles, resources),
            checkpoints,
            *([express_checkpoints] if express_checkpoints else []),
            artifacts,
            *_runs_of(resources, runs.inherited_prefixes),
        ],
        "fileSystem": file_system,
        "shares": list(queue.shares),
        "maxPriority": runs.limits.max_priority,
        # teams[].inherits_single_team_runs: the pre-teams runs joined the channels and the resume sources
        # above; the other teams' runs within them stay refused.
        **({"foreignRuns": _runs_of(resources, runs.foreign_prefixes)} if runs.inherited else {}),
    }


def _runs_of(resources: PipelineResources, prefixes: Sequence[str]) -> list[str]:
    """The checkpoint and artifact buckets' locations of runs named with `prefixes`."""
    buckets = (resources.checkpoint_bucket, resources.artifact_bucket)
    return [f"s3://{bucket}/{prefix}" for bucket in buckets for prefix in prefixes]


# JSONata helpers bound in every check: a URI under one of some prefixes; two lists with the same members.
_HELPERS = (
    '$under := function($uri, $prefixes) { $type($uri) = "string" and '
    "$count($filter($prefixes, function($p) { $substring($uri, 0, $length($p)) = $p })) > 0 }; "
    "$same := function($a, $b) { $count($a) = $count($b) and "
    "$count($filter($a, function($x) { $x in $b })) = $count($a) and "
    "$count($filter($b, function($x) { $x in $a })) = $count($b) }; "
    '$list := function($values) { $join([$values], ", ") }; '
    f'$normalized := function($path) {{ $not($type($path) = "string") or $not($contains('
    f'$replace($path, {regex_literal(S3_SCHEME)}, ""), {regex_literal(NOT_NORMALIZED)})) }}; '
)


def _request_rules(named: bool, foreign: bool) -> list[tuple[str, str]]:
    """(refuses, cause) of the request `$r` against the table `$g`, in order; the first that refuses wins:
    what the job is and runs on, then where it reads and writes (`foreign`: and not in other teams' runs)."""
    return [*_job_rules(), *location_rules(named), *(foreign_run_rules() if foreign else [])]


def _job_rules() -> list[tuple[str, str]]:
    """The request's fields, role, image, network, instances and runtime."""
    config = "$r.ResourceConfig"
    return [
        ('$type($r) != "object"', '"request must be a CreateTrainingJob request (a JSON object)."'),
        (
            "$count($unknownFields) > 0",
            '"request may hold only the fields the pipeline sends (" & $list($g.fields) & "); " & '
            '$list($unknownFields) & " is not one of them."',
        ),
        (
            "$r.RoleArn != $g.roleArn",
            '"RoleArn must be " & $g.roleArn & ", the pipeline\'s SageMaker role."',
        ),
        (
            "$r.AlgorithmSpecification.TrainingImage != $g.image",
            '"AlgorithmSpecification.TrainingImage must be " & $g.image & ", the project\'s image."',
        ),
        (
            "$not($same([$r.VpcConfig.Subnets], $g.subnets))",
            '"VpcConfig.Subnets must be exactly the project\'s training subnets: " & $list($g.subnets) & "."',
        ),
        (
            "$not($same([$r.VpcConfig.SecurityGroupIds], $g.securityGroups))",
            '"VpcConfig.SecurityGroupIds must be exactly the project\'s training security groups: " & '
            '$list($g.securityGroups) & "."',
        ),
        (
            f"$exists({config}.InstanceGroups)",
            '"ResourceConfig.InstanceGroups is not allowed: the pipeline names instance types in '
            'ResourceConfig.InstancePreferences or ResourceConfig.InstanceType."',
        ),
        (
            "$count($types) = 0 or "
            "$count($filter($types, function($t) { $not($t in $keys($g.counts)) })) > 0",
            '"ResourceConfig must name only instance types the profiles allow (" & $list($keys($g.counts)) & '
            '"); it names " & ($count($types) = 0 ? "none" : $list($types)) & "."',
        ),
        (
            "$count($overCounts) > 0",
            '($o := $overCounts[0]; "ResourceConfig asks for " & $string($o.count) & " x " & $o.type & '
            '"; the profiles allow a whole number from 1 to " & $string($lookup($g.counts, $o.type)) & ".")',
        ),
        (
            '($s := $r.StoppingCondition.MaxRuntimeInSeconds; $type($s) != "number" or $s < 1 or '
            "$s > $g.maxRuntimeSeconds)",
            '"StoppingCondition.MaxRuntimeInSeconds must be a number of seconds from 1 to " & '
            '$string($g.maxRuntimeSeconds) & "."',
        ),
    ]


def _chain(rules: list[tuple[str, str]]) -> str:
    chain = "null"
    for refuses, cause in reversed(rules):
        chain = f"(({refuses}) ? {cause} : {chain})"
    return chain


def request_problem(table: dict[str, Any], request: str, *, named: bool = True) -> str:
    """JSONata: null when the request `request` (an expression) is one `table` allows, else the cause."""
    types = "[$r.ResourceConfig.InstancePreferences.InstanceType, $r.ResourceConfig.InstanceType]"
    # Every count the request asks for, with its type: a preference's own, or the job-level one for each type.
    asked = (
        "$append([$r.ResourceConfig.InstancePreferences[$exists(InstanceCount)].{"
        '"type": InstanceType, "count": InstanceCount}], '
        '$exists($r.ResourceConfig.InstanceCount) ? [$map($types, function($t) { {"type": $t, '
        '"count": $r.ResourceConfig.InstanceCount} })] : [])'
    )
    over = (
        f'$filter({asked}, function($a) {{ $type($a.count) != "number" or $a.count < 1 or '
        "$a.count != $floor($a.count) or $a.count > $lookup($g.counts, $a.type) })"
    )
    return (
        f"($g := {literal(table)}; $r := {request}; {_HELPERS}"
        '$unknownFields := $type($r) = "object" ? '
        "$filter($keys($r), function($k) { $not($k in $g.fields) }) : []; "
        f"$types := {types}; $overCounts := [{over}]; "
        f"$unnormalized := [$filter({LOCATIONS}, function($l) {{ $not($normalized($l.path)) }})]; "
        f"{_chain(_request_rules(named, bool(table.get('foreignRuns'))))})"
    )


def queued_fields_problem(table: dict[str, Any], share: str, priority: str) -> str:
    """JSONata: null when the Batch share and priority (expressions, null when not sent) are what the queue
    allows (one of queue.shares; priority 0-MAX_PRIORITY, only in a fair-share queue), else the cause. No
    share in a fair-share queue is Batch's to refuse (shareIdentifier is required there: botocore's batch
    model, SubmitServiceJob), and the grant's to deny."""
    shares, bound = literal(table["shares"]), table["maxPriority"]
    rules = [
        (
            f"$count({shares}) > 0 and $s != null and $not($s in {shares})",
            f'"share must be one of " & $join({shares}, ", ") & " (queue.shares)."',
        ),
        (
            f"$count({shares}) = 0 and $s != null",
            '"share must be null: the queue has no shares (queue.shares)."',
        ),
        (
            f"$count({shares}) = 0 and $p != null",
            '"priority must be null: priority orders jobs only in a queue with fair shares (queue.shares)."',
        ),
        (
            f'$p != null and ($type($p) != "number" or $p < 0 or $p > {bound} or $p != $floor($p))',
            f'"priority must be a whole number from 0 to {bound} (higher runs first)."',
        ),
    ]
    return (
        f"($s := $exists({share}) ? {share} : null; $p := $exists({priority}) ? {priority} : null; "
        f"{_chain(rules)})"
    )


def registration_problem(table: dict[str, Any]) -> str:
    """JSONata: the registration machine's input checked, as the evaluation job is built from it
    (registry/evaluation_request.py): the run's request, its name and its model, which the evaluation job
    reads."""
    name, model = "$states.input.runName", "$states.input.modelArtifacts"
    prefix, artifacts = literal(table["jobNamePrefix"]), literal(table["artifacts"])
    return (
        f"($q := {request_problem(table, '$states.input.request', named=False)}; $q != null ? $q : "
        f'$not($type({name}) = "string" and $substring({name}, 0, $length({prefix})) = {prefix}) ? '
        f'"runName must start with " & {prefix} & "." : '
        f'$not($type({model}) = "string" and $substring({model}, 0, $length({artifacts})) = {artifacts}) ? '
        f'"modelArtifacts must lie under " & {artifacts} & "." : null)'
    )


def refuse_unless_allowed(
    scope: Construct, problem: str, then: sfn.IChainable, *, construct_id: str = "CheckRequest"
) -> sfn.IChainable:
    """The first states of an inner machine: evaluate `problem` (JSONata yielding null or a cause) into
    $refusal, then fail with RequestRefused or go on to `then`."""
    check = sfn.Pass.jsonata(
        scope,
        construct_id,
        comment="The request must be one the pipeline's profiles allow (stacks/pipeline/request_guard.py).",
        assign={"refusal": expression(problem)},
    )
    refused = sfn.Fail.jsonata(
        scope, "RequestRefused", error=ERROR_REQUEST_REFUSED, cause=expression("$refusal")
    )
    allowed = (
        sfn.Choice.jsonata(scope, "IsRequestAllowed")
        .when(sfn.Condition.jsonata(expression("$refusal != null")), refused)
        .otherwise(then)
    )
    return check.next(allowed)
