"""JSONata of the registration machine: the evaluation job's request (the version's: version_request.py).

Every expression reads the machine's variables: `$run` (the machine's input: profile, runName,
executionArn, request, trainingJobs, modelArtifacts, timeLimitSeconds, costCap, spentUsd; in queue mode share
and priority), `$attempt` (the evaluation job's number: 1, then one more for each retry,
evaluation_states.py), `$settings` (the profile's entry of registry_table), `$evaluation` ({loss,
perplexity, tokens, metric} from the evaluation job's FinalMetricDataList: `metric` is the profile's own,
`$settings.metric`), `$evaluationJob` (the name of the
training job that reported it, as SageMaker knows it), `$baseline` (the best comparable Approved version:
{arn, version, value, ...}, or null: version_request.py), `$trainingSetManifest` and `$datasetManifest`
(the evaluation set's): {hash, objects, bytes} (stacks/pipeline/dataset_manifest.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stacks.pipeline.dataset_manifest import MANIFEST_VARIABLE
from stacks.pipeline.jsonata_text import literal
from stacks.pipeline.pipeline_input_rules import retry_settings
from training_scripts.metrics import EVALUATION_METRIC_DEFINITIONS, evaluation_metric_definition
from trainstack.job_request import PipelineResources
from trainstack.profiles import Profile
from trainstack.registry import (
    EVALUATION_FILE,
    EVALUATION_JOB_SUFFIX,
    EVALUATION_PROGRAM,
    JOB_NAME_MAX_LENGTH,
    RUN_HASH_LENGTH,
    code_repository,
    code_version,
    config_hash,
    group_name,
)
from trainstack.registry_settings import evaluation_metric
from trainstack.team_code import SUBMIT_DIRECTORY_HYPERPARAMETER

# The $attempt-th evaluation job of the run, as trainstack.registry.evaluation_job_name names it.
EVALUATION_JOB_NAME = (
    f'($s := "{EVALUATION_JOB_SUFFIX}" & ($attempt > 1 ? $string($attempt) : ""); $n := $run.runName; '
    f"$length($n) + $length($s) <= {JOB_NAME_MAX_LENGTH} ? $n & $s : "
    f'$substring($n, 0, {JOB_NAME_MAX_LENGTH - 1 - RUN_HASH_LENGTH} - $length($s)) & "-" & '
    f'$substring($hash($n, "SHA-256"), 0, {RUN_HASH_LENGTH}) & $s)'
)
# Request members of the run that the evaluation job leaves out: it writes no checkpoints and no
# TensorBoard events, and it reads its own channels.
NOT_FOR_EVALUATION = ("CheckpointConfig", "TensorBoardOutputConfig", "InputDataConfig")


def registry_table(project: str, profiles: Sequence[Profile], resources: PipelineResources) -> dict[str, Any]:
    """What the machine needs of each profile with a `registry:` block, by profile name."""
    return {
        profile.name: {
            "group": group_name(project, profile.name),
            "approval": profile.registry.approval,
            "firstVersion": profile.registry.first_version,
            **_metric_settings(profile),
            "maxEvalTokens": str(profile.registry.max_eval_tokens),
            "evaluationPrefix": profile.registry.evaluation_prefix,
            "evaluationUri": f"s3://{resources.dataset_bucket}/{profile.registry.evaluation_prefix}",
            "configHash": config_hash(profile),
            # The revision the image of this synth is built from (stacks/image bakes the same one in).
            "codeVersion": code_version(),
            "codeRepository": code_repository(),
            # What the evaluation jobs' retries follow (evaluation_states.py), as the pipeline's $plan has it.
            "retry": retry_settings(profile),
        }
        for profile in profiles
        if profile.registry is not None
    }


def _metric_settings(profile: Profile) -> dict[str, Any]:
    """The gate's metric (name, goal, tolerance), the program that reports it and the MetricDefinitions
    that read it: the product's evaluate.py and its loss unless the profile names its own."""
    metric = evaluation_metric(profile)
    own = evaluation_metric_definition(metric.name)
    # A team's entry point named like the product's (evaluate.py) is the team's, run from its bundle.
    own_entry_point = profile.evaluation is not None and profile.evaluation.entry_point is not None
    program = profile.evaluation.entry_point if own_entry_point else EVALUATION_PROGRAM
    return {
        "metric": metric.name,
        "goal": metric.goal,
        "tolerance": metric.tolerance,
        # The toolkit reads sagemaker_program JSON-encoded, as the SageMaker Python SDK writes it.
        "program": json.dumps(program),
        "ownEntryPoint": own_entry_point,
        "metricDefinitions": EVALUATION_METRIC_DEFINITIONS
        + ([] if own in EVALUATION_METRIC_DEFINITIONS else [own]),
    }


def evaluation_request() -> str:
    """The run's request for one instance, its program evaluate.py, its channels the model and the
    profile's evaluation set, its metrics the evaluation's. ($map of a one-element array yields the element,
    not an array, in JSONata: the array constructor keeps InstancePreferences a list.)"""
    resources = (
        '($c := $run.request.ResourceConfig; $merge([$c, $c.InstancePreferences ? {"InstancePreferences": '
        '[$map($c.InstancePreferences, function($p) { $merge([$p, {"InstanceCount": 1}]) })]} : '
        '{"InstanceCount": 1}]))'
    )
    channel = (
        'function($name, $uri) {{"ChannelName": $name, "InputMode": "File", "DataSource": {"S3DataSource": '
        '{"S3DataType": "S3Prefix", "S3Uri": $uri, "S3DataDistributionType": "FullyReplicated"}}}}'
    )
    kept = f"$sift($run.request, function($v, $k) {{ $not($k in {literal(list(NOT_FOR_EVALUATION))}) }})"
    return (
        f"($channel := {channel}; $merge([{kept}, {{"
        f'"TrainingJobName": {EVALUATION_JOB_NAME}, '
        # The run's code (trainstack.team_code) goes with the evaluation only when the profile's evaluation
        # entry point is the team's own; the product's evaluate.py is the image's.
        '"HyperParameters": $merge([$settings.ownEntryPoint ? $run.request.HyperParameters : '
        "$sift($run.request.HyperParameters, function($v, $k) { "
        f"$k != {literal(SUBMIT_DIRECTORY_HYPERPARAMETER)} }}), {{"
        '"sagemaker_program": $settings.program, '
        '"max_eval_tokens": $settings.maxEvalTokens, '
        f'"eval_manifest_hash": ${MANIFEST_VARIABLE}.hash}}]), '
        '"AlgorithmSpecification": $merge([$run.request.AlgorithmSpecification, '
        '{"MetricDefinitions": $settings.metricDefinitions}]), '
        f'"ResourceConfig": {resources}, '
        '"InputDataConfig": [$channel("model", $run.modelArtifacts), '
        '$channel("eval", $settings.evaluationUri)]'
        "}]))"
    )


def evaluation_metrics() -> str:
    """{loss, perplexity, tokens, metric} from the evaluation job's FinalMetricDataList (DescribeTrainingJob
    result's, in the attempt's output `job.metrics`), `metric` the profile's (`$settings.metric`); members not
    reported are absent. Each is taken at the 15 significant digits that `$string` writes into the version's
    metadata (JSONata 2.0.6 writes no more), so the value the gate compares is the value a later
    registration reads back as its baseline."""
    values = ", ".join(
        f'"{name.split(":")[1]}": {_reported(json.dumps(name))}'
        for name in (definition["Name"] for definition in EVALUATION_METRIC_DEFINITIONS)
    )
    return f'($m := $outcome.job.metrics; {{{values}, "metric": {_reported(REPORTED_METRIC)}}})'


# The profile's metric as the evaluation job's FinalMetricDataList names it (evaluation_metric_definition).
REPORTED_METRIC = '"evaluation:" & $settings.metric'


def _reported(name: str) -> str:
    return f"$number($string($m[MetricName = {name}][0].Value))"


def evaluation_uri() -> str:
    """evaluation.json: the model dir of the job that reported the loss (`$evaluationJob`: in queue mode
    the training job Batch started, `AWSBatch<jobName><attemptId>`), uploaded uncompressed (OutputDataConfig
    NONE)."""
    return (
        '$replace($run.request.OutputDataConfig.S3OutputPath, /\\/$/, "") & "/" & $evaluationJob '
        f'& "/output/model/{EVALUATION_FILE}"'
    )
