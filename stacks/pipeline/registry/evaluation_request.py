"""JSONata of the registration machine: the evaluation job's request (the version's: version_request.py).

Every expression reads the machine's variables: `$run` (the machine's input: profile, runName,
executionArn, request, trainingJobs, modelArtifacts, timeLimitSeconds, costCap, spentUsd; in queue mode share
and priority), `$attempt` (the evaluation job's number: 1, then one more for each retry,
evaluation_states.py), `$settings` (the profile's entry of registry_table), `$evaluation` ({loss,
perplexity, tokens} from the evaluation job's FinalMetricDataList), `$evaluationJob` (the name of the
training job that reported it, as SageMaker knows it), `$baseline` (the best comparable Approved version:
{arn, version, loss, ...}, or null: version_request.py), `$trainingSetManifest` and `$datasetManifest`
(the evaluation set's): {hash, objects, bytes} (stacks/pipeline/dataset_manifest.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stacks.pipeline.dataset_manifest import MANIFEST_VARIABLE
from stacks.pipeline.jsonata_text import literal
from stacks.pipeline.pipeline_input_rules import retry_settings
from training_scripts.metrics import EVALUATION_METRIC_DEFINITIONS
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
            "tolerance": profile.registry.loss_tolerance,
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
        # A team's own code (trainstack.team_code) stays out: evaluate.py is the image's.
        '"HyperParameters": $merge([$sift($run.request.HyperParameters, function($v, $k) { '
        f"$k != {literal(SUBMIT_DIRECTORY_HYPERPARAMETER)} }}), {{"
        f'"sagemaker_program": {literal(json.dumps(EVALUATION_PROGRAM))}, '
        '"max_eval_tokens": $settings.maxEvalTokens, '
        f'"eval_manifest_hash": ${MANIFEST_VARIABLE}.hash}}]), '
        '"AlgorithmSpecification": $merge([$run.request.AlgorithmSpecification, '
        f'{{"MetricDefinitions": {literal(EVALUATION_METRIC_DEFINITIONS)}}}]), '
        f'"ResourceConfig": {resources}, '
        '"InputDataConfig": [$channel("model", $run.modelArtifacts), '
        '$channel("eval", $settings.evaluationUri)]'
        "}]))"
    )


def evaluation_metrics() -> str:
    """{loss, perplexity, tokens} from the evaluation job's FinalMetricDataList (DescribeTrainingJob's, in
    the attempt's output `job.metrics`); null members if absent. Each is taken at the 15 significant digits
    that `$string` writes into the version's metadata (JSONata 2.0.6 writes no more), so the loss the gate
    compares is the loss a later registration reads back as its baseline."""
    values = ", ".join(
        f'"{name.split(":")[1]}": $number($string($m[MetricName = "{name}"][0].Value))'
        for name in (definition["Name"] for definition in EVALUATION_METRIC_DEFINITIONS)
    )
    return f"($m := $outcome.job.metrics; {{{values}}})"


def evaluation_uri() -> str:
    """evaluation.json: the model dir of the job that reported the loss (`$evaluationJob`: in queue mode
    the training job Batch started, `AWSBatch<jobName><attemptId>`), uploaded uncompressed (OutputDataConfig
    NONE)."""
    return (
        '$replace($run.request.OutputDataConfig.S3OutputPath, /\\/$/, "") & "/" & $evaluationJob '
        f'& "/output/model/{EVALUATION_FILE}"'
    )
