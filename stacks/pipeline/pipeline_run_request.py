"""The run's CreateTrainingJob request and limits, as JSONata over the checked input (`$checked`).

The same per-run fields as trainstack.job_request.build_create_training_job_request (its module
docstring has the table), applied to the profile's base request with $merge; the request SageMaker
receives equals the Python builder's for every profile (tests/pipeline prove it).
"""

from __future__ import annotations

import re

from stacks.pipeline.jsonata_text import literal
from trainstack.checkpoint_requests import RESUME_FROM_HYPERPARAMETER, resume_channel
from trainstack.job_request import (
    EXECUTION_TAG,
    NAMESPACE_TAG,
    RUN_TAG,
    PipelineResources,
    code_location,
    output_path,
    tensorboard_uri,
)
from trainstack.team_code import SUBMIT_DIRECTORY_HYPERPARAMETER, code_hyperparameters

_MARK = "\0"
_JOB_MARK = "\1"
# The attempt's job name (job_request.job_name) in the pipeline, where $plan and $attempt are known.
_ATTEMPT_JOB_NAME = '$plan.runName & "-" & $string($attempt)'


def _with_values(text: str, values: dict[str, str]) -> str:
    """Text built with marks (keys of `values`) as a JSONata string expression of the marks' values."""
    pieces = re.split("(" + "|".join(map(re.escape, values)) + ")", text)
    return " & ".join(values[piece] if piece in values else literal(piece) for piece in pieces if piece)


def _with_run_name(uri: str) -> str:
    """A URI built for the run name _MARK, as a JSONata string expression of `$in.runName`."""
    return _with_values(uri, {_MARK: "$in.runName"})


def attempt_fields_expression(resources: PipelineResources) -> str:
    """The per-attempt fields merged into the run's request: TrainingJobName and TensorBoardOutputConfig."""
    tensorboard = _with_values(
        tensorboard_uri(resources, _MARK, _JOB_MARK), {_MARK: "$plan.runName", _JOB_MARK: _ATTEMPT_JOB_NAME}
    )
    return (
        f'{{"TrainingJobName": {_ATTEMPT_JOB_NAME}, '
        f'"TensorBoardOutputConfig": {{"S3OutputPath": {tensorboard}}}}}'
    )


def checkpoint_location_expression(request: str) -> str:
    """Where the run of `request` keeps its checkpoints (job_request.checkpoint_uri): SageMaker's sync
    target, or train.py's checkpoint_dir for a store it reads and writes itself."""
    return (
        f"($exists({request}.CheckpointConfig) ? {request}.CheckpointConfig.S3Uri "
        f": {request}.HyperParameters.checkpoint_dir)"
    )


def code_digest_expression(request: str) -> str:
    """The digest of the team's code `request` runs (the second-last segment of its JSON-encoded
    sagemaker_submit_directory, team_code.code_uri); null for the image's own entry point."""
    submitted = f"$lookup({request}.HyperParameters, {literal(SUBMIT_DIRECTORY_HYPERPARAMETER)})"
    return f'($d := {submitted}; $exists($d) ? $split($d, "/")[-2] : null)'


def max_runtime_seconds_expression(hours: str) -> str:
    """trainstack.job_request.max_runtime_seconds: $round rounds half to even, like Python's round."""
    return f"$round({hours} * 3600)"


def request_expression(resources: PipelineResources, namespace: str) -> str:
    """The run's request; `namespace`: the pipeline's project, which its jobs' namespace tag names."""
    resume = literal(resume_channel(_MARK)).replace(literal(_MARK), "$in.resumeFrom")
    output = _with_run_name(output_path(resources, _MARK))
    # The profile's checkpoint prefix (its table entry), the same for every attempt of the run.
    checkpoint = '$p.checkpointPrefix & $in.runName & "/"'
    runtime = max_runtime_seconds_expression("$in.maxRuntimeHours")
    resume_hyperparameter = literal(RESUME_FROM_HYPERPARAMETER)
    # The team's code (job_request: code_hyperparameters of code_location), its digest and entry marked.
    code = ", ".join(
        f"{literal(name)}: {_with_values(value, {_MARK: '$in.code.digest', _JOB_MARK: '$in.code.entry'})}"
        for name, value in code_hyperparameters(code_location(resources, _MARK), _JOB_MARK).items()
    )
    fields = {
        "OutputDataConfig": f'$merge([$base.OutputDataConfig, {{"S3OutputPath": {output}}}])',
        "Tags": (
            f'[{{"Key": {literal(EXECUTION_TAG)}, "Value": $states.context.Execution.Id}}, '
            f'{{"Key": {literal(RUN_TAG)}, "Value": $in.runName}}, '
            f'{{"Key": {literal(NAMESPACE_TAG)}, "Value": {literal(namespace)}}}]'
        ),
        "HyperParameters": (
            "$merge([$base.HyperParameters, "
            f'$exists($base.CheckpointConfig) ? {{}} : {{"checkpoint_dir": {checkpoint}}}, '
            f"$in.hyperparameters, $direct ? {{{resume_hyperparameter}: $in.resumeFrom}} : {{}}, "
            f"$exists($in.code) ? {{{code}}} : {{}}])"
        ),
        # An instance count applies to every preference (which then lose their own counts).
        "ResourceConfig": (
            "$exists($in.instanceCount) "
            '? $merge([$p.uncountedResourceConfig, {"InstanceCount": $in.instanceCount}]) '
            ": $base.ResourceConfig"
        ),
        "StoppingCondition": (
            "$exists($in.maxRuntimeHours) "
            f'? $merge([$base.StoppingCondition, {{"MaxRuntimeInSeconds": {runtime}}}]) '
            ": $base.StoppingCondition"
        ),
        "InputDataConfig": (
            f"$exists($in.resumeFrom) and $not($direct) ? $append($base.InputDataConfig, [{resume}]) "
            ": $base.InputDataConfig"
        ),
    }
    run_fields = ", ".join(f"{literal(name)}: {value}" for name, value in fields.items())
    synced = f'{{"CheckpointConfig": $merge([$base.CheckpointConfig, {{"S3Uri": {checkpoint}}}])}}'
    # job_request.resumes_directly: resumeFrom under one of the profile's direct-resume prefixes.
    direct = (
        "$exists($in.resumeFrom) and $count($filter($p.directResumePrefixes, function($r) "
        "{ $substring($in.resumeFrom, 0, $length($r)) = $r })) > 0"
    )
    return (
        "($p := $checked.profile; $in := $checked.input; $base := $p.request; "
        f"$direct := {direct}; "
        f"$merge([$base, {{{run_fields}}}, $exists($base.CheckpointConfig) ? {synced} : {{}}]))"
    )


def plan_expression() -> str:
    """Retry policies and limits of the run. The time limit (the job is stopped after it) is
    MaxRuntimeInSeconds plus the profile's allowances, both measured from the execution's start; no
    infrastructure retry starts after the profile's share of it (faultDeadlineMillis)."""
    runtime = max_runtime_seconds_expression("$in.maxRuntimeHours")
    return (
        "($p := $checked.profile; $in := $checked.input; "
        "$start := $toMillis($states.context.Execution.StartTime); "
        f"$limit := ($exists($in.maxRuntimeHours) ? {runtime} "
        ": $p.request.StoppingCondition.MaxRuntimeInSeconds) + $p.extraSeconds; "
        '{"profile": $p.name, "runName": $in.runName, "maxAttempts": $p.maxAttempts, "backoff": $p.backoff, '
        '"deadlineSeconds": $p.deadlineSeconds, "deadlineMillis": $start + 1000 * $p.deadlineSeconds, '
        '"timeLimitSeconds": $limit, "stopAtMillis": $start + 1000 * $limit, '
        '"faultRetries": $p.faultRetries, '
        '"faultDeadlineMillis": $start + $round(1000 * $p.faultRetries.deadlineShare * $limit)})'
    )
