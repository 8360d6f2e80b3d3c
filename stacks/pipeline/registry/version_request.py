"""JSONata of the registration machine's version: the Approved versions' facts, the gate, the lineage and the
CreateModelPackage request (docs/registry.md, steps 5-7).

Variables besides evaluation_request.py's: `$approved` (every Approved version of the group, newest first,
as approved_facts() reads each: {arn, version, value, evaluationSet, maxEvalTokens, seqLen}, value the
profile's metric, null when its metadata has none), `$imageUri` (the image with its digest), `$packageArn`.

The baseline rule: a version is Approved when its metric is no worse than the metric of the best Approved
version evaluated the same way (same evaluation set manifest, max_eval_tokens and seq_len) by more than the
tolerance, an absolute amount of the metric: at most best + tolerance where lower is better (`minimize`,
the evaluation loss within `loss_tolerance` unless the profile names its own metric), at least best -
tolerance where higher is better (`maximize`). So no chain of versions each within the tolerance of the last
drifts away from the best.
"""

from __future__ import annotations

from stacks.pipeline.dataset_manifest import MANIFEST_VARIABLE
from stacks.pipeline.pipeline_run_request import checkpoint_location_expression, code_digest_expression
from stacks.pipeline.registry.evaluation_request import evaluation_uri
from training_scripts.metrics import EVALUATION_DEFAULT_SEQ_LEN
from trainstack.registry import LINEAGE_KEYS, METADATA_VALUE_MAX_LENGTH, METRIC_KEY_PREFIX
from trainstack.registry_settings import APPROVED, PENDING, REJECTED

# How the evaluation is compared: the facts that must match the baseline's, with the names a user knows.
COMPARED = {
    "evaluationSet": ("evaluationSet", "evaluation set manifest"),
    "maxEvalTokens": ("maxEvalTokens", "max_eval_tokens"),
    "seqLen": ("seqLen", "seq_len"),
}
# This run's values of COMPARED, as its lineage records them.
RUN_FACTS = (
    f'{{"evaluationSet": ${MANIFEST_VARIABLE}.hash, "maxEvalTokens": $settings.maxEvalTokens, '
    '"seqLen": ($s := $run.request.HyperParameters.seq_len; $s ? $string($s) : '
    f'"{EVALUATION_DEFAULT_SEQ_LEN}")}}'
)
# What JSONata 2.0.6's $number reads (JSON's numbers: no `+`, no bare `.5`), finite (at most the 21 digits
# `$string` writes below 1e21, an exponent of at most 2 digits): any other text is no value.
_NUMBER = r"/^-?[0-9]{1,21}(\.[0-9]+)?([eE][-+]?[0-9]{1,2})?$/"
# The metadata key of the profile's metric (`evaluation.loss` for the loss, as before), and its name in the
# gate's sentences ("evaluation loss", "evaluation accuracy").
METRIC_KEY = f'"{METRIC_KEY_PREFIX}" & $settings.metric'
METRIC_LABEL = '"evaluation " & $settings.metric'
# Better first: the lower value where the goal is minimize, the higher where it is maximize.
_WORSE = '($settings.goal = "maximize" ? $a.value < $b.value : $a.value > $b.value)'


def approved_facts() -> str:
    """One Approved version's facts from its DescribeModelPackage result, its value the profile's metric."""
    facts = ", ".join(f'"{fact}": $lookup($m, "{LINEAGE_KEYS[key]}")' for fact, (key, _) in COMPARED.items())
    return (
        "($r := $states.result; $m := $r.CustomerMetadataProperties; "
        f"$l := $lookup($m, {METRIC_KEY}); "
        '{"arn": $r.ModelPackageArn, "version": $r.ModelPackageVersion, '
        f'"value": ($l and $contains($l, {_NUMBER})) ? $number($l) : null, {facts}}})'
    )


def baseline() -> str:
    """The best Approved version (by the profile's metric and goal) evaluated as this run was (COMPARED), or
    null; among equal values the earliest version (the lowest number: `$approved` is newest first)."""
    same = " and ".join(f"{fact} = $facts.{fact}" for fact in COMPARED)
    return (
        f"($facts := {RUN_FACTS}; $c := [$approved[value != null and {same}]]; $count($c) = 0 ? null : "
        f"$sort($c, function($a, $b) {{ {_WORSE} or ($a.value = $b.value and $a.version > $b.version) }})"
        "[0])"
    )


def _differences() -> str:
    """What the newest Approved version ($n) was evaluated on otherwise than this run, `; ` separated."""
    parts = ", ".join(
        f'($not($n.{fact} = $facts.{fact}) ? "{label} " & ($n.{fact} ? $n.{fact} : "unrecorded") & " vs " & '
        f"$facts.{fact})"
        for fact, (_, label) in COMPARED.items()
    )
    return f'($facts := {RUN_FACTS}; $join([{parts}], "; "))'


def decision() -> str:
    """{status, description}: the gate (module docstring). manual leaves the version pending; auto without
    any Approved version follows first_version; an Approved version without a readable value of the metric,
    or none evaluated as this run was, leaves it pending, saying why; else the baseline rule."""
    measured = f'{METRIC_LABEL} & " " & $formatNumber($evaluation.metric, "0.0000")'
    base = '$formatNumber($baseline.value, "0.0000")'
    tolerance = '$formatNumber($settings.tolerance, "0.0###")'
    compared = (
        f'{measured} & " vs " & {base} & " of Approved version " '
        f'& $string($baseline.version) & ", the best comparable (tolerance " & {tolerance} & ", absolute)"'
    )
    why_not = (
        '($u := [$approved[value = null]]; $count($u) > 0 ? "Approved version " & $string($u[0].version) & '
        f'" records no " & {METRIC_LABEL} & " to compare with" : '
        '"not comparable with the newest Approved version " & '
        f'$string($n.version) & ": " & {_differences()}) & "; " & {measured}'
    )
    within = (
        '($settings.goal = "maximize" ? $evaluation.metric >= $baseline.value - $settings.tolerance : '
        "$evaluation.metric <= $baseline.value + $settings.tolerance)"
    )
    pending = f'{{"status": "{PENDING}", "description": "pending, " & {why_not}}}'
    return (
        f"($baseline := {baseline()}; $n := $approved[0]; "
        f'$settings.approval = "manual" ? {{"status": "{PENDING}", "description": "approval: manual; " & '
        f'($baseline ? {compared} : {measured} & ", no Approved version yet")}} : '
        f'$count($approved) = 0 ? {{"status": $settings.firstVersion, "description": "first version: no '
        f'Approved version to compare with; " & {measured} & "; first_version: " & '
        f"$settings.firstVersion}} : "
        f"$count($approved[value = null]) > 0 or $not($baseline) ? {pending} : "
        f'{within} ? {{"status": "{APPROVED}", '
        f'"description": "approved: " & {compared}}} : '
        f'{{"status": "{REJECTED}", "description": "rejected, worse than the best approved model: " & '
        f"{compared}}})"
    )


def lineage() -> str:
    """CustomerMetadataProperties: the facts of LINEAGE_KEYS, each within the value limit; the training jobs
    that ran ($run.trainingJobs: as SageMaker named them, Batch's `AWSBatch...` in queue mode) joined by
    spaces, or as `first .. last` when they do not fit."""
    jobs = (
        "($names := $append([], $run.trainingJobs); "
        f'$joined := $join($names, " "); $length($joined) <= {METADATA_VALUE_MAX_LENGTH} ? $joined : '
        '$names[0] & " .. " & $names[-1])'
    )
    facts = {
        "run": "$run.runName",
        "execution": "$run.executionArn",
        "jobs": jobs,
        "image": "$imageUri",
        "imageDigest": '($imageDigest = "unresolved" ? "unresolved" : "")',
        "config": "$settings.configHash",
        "code": "$settings.codeVersion",
        "teamCode": code_digest_expression("$run.request"),
        "trainingSet": "$trainingSetManifest.hash",
        "evaluationSet": f"${MANIFEST_VARIABLE}.hash",
        "checkpoint": checkpoint_location_expression("$run.request"),
        "evaluationJob": "$evaluationJob",
        "maxEvalTokens": f"{RUN_FACTS}.maxEvalTokens",
        "seqLen": f"{RUN_FACTS}.seqLen",
        "loss": "$string($evaluation.loss)",
        "perplexity": "$string($evaluation.perplexity)",
        "tokens": "$string($evaluation.tokens)",
    }
    entries = ", ".join(f'"{LINEAGE_KEYS[fact]}": {value}' for fact, value in facts.items())
    # The profile's metric under its own key (for the loss, the same key and value as above).
    metric = f"{{{METRIC_KEY}: $string($evaluation.metric)}}"
    # A missing fact (no checkpoint config, a metric the evaluation does not report) would be an empty value,
    # which the API refuses: left out.
    return (
        f"$sift($merge([{{{entries}}}, {metric}]), "
        'function($v) { $type($v) = "string" and $length($v) > 0 })'
    )


def client_token() -> str:
    """CreateModelPackage's idempotency token: the same for every retry of this run's registration of its
    $attempt-th evaluation, another for any other (botocore: 1-36 characters of [a-zA-Z0-9-])."""
    return '$substring($hash($run.executionArn & "/" & $string($attempt), "SHA-256"), 0, 36)'


def model_package_request() -> str:
    """CreateModelPackage: a version of the profile's group, pending until the gate's update; its container
    the image by digest; MetadataProperties: the pipeline execution (GeneratedBy) and the code's revision
    and repository as the synth knew them."""
    container = (
        '$substring($run.modelArtifacts, -7) = ".tar.gz" ? '
        '{"Image": $imageUri, "ModelDataUrl": $run.modelArtifacts} '
        ': {"Image": $imageUri, "ModelDataSource": {"S3DataSource": {"S3Uri": $run.modelArtifacts, '
        '"S3DataType": "S3Prefix", "CompressionType": "None"}}}'
    )
    return (
        "{"
        '"ModelPackageGroupName": $settings.group, '
        '"ModelPackageDescription": "Run " & $run.runName & " (" & $run.executionArn & ")", '
        f'"ModelApprovalStatus": "{PENDING}", '
        f'"ClientToken": {client_token()}, '
        '"MetadataProperties": {"GeneratedBy": $run.executionArn, "CommitId": $settings.codeVersion, '
        '"Repository": $settings.codeRepository}, '
        f'"InferenceSpecification": {{"Containers": [{container}]}}, '
        '"ModelMetrics": {"ModelQuality": {"Statistics": {"ContentType": "application/json", '
        f'"S3Uri": {evaluation_uri()}}}}}}}, '
        f'"CustomerMetadataProperties": {lineage()}'
        "}"
    )
