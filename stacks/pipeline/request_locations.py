"""Where a request may read and write, as the inner machines' request check reads it (request_guard.py): the
job's name, checkpoints, output, channels, the locations train.py reads itself and the team's own code. Each
rule is (JSONata that refuses the request `$r` against the table `$g`, the cause); `$under`, `$normalized`
and `$list` are request_guard's helpers, bound in every check."""

from __future__ import annotations

from stacks.pipeline.jsonata_text import literal
from trainstack.checkpoint_requests import RESUME_FROM_HYPERPARAMETER
from trainstack.jsonata_regex import regex_literal
from trainstack.team_code import (
    BUNDLE_NAME,
    DIGEST_PATTERN,
    ENTRY_PATTERN,
    PROGRAM_HYPERPARAMETER,
    SUBMIT_DIRECTORY_HYPERPARAMETER,
)

# A location in a directory bucket (S3 user guide, "Directory bucket naming rules": names end `--x-s3`).
DIRECTORY_BUCKET_URI = r"^s3://[^/]+--x-s3/"

# Every location a request names (S3 URIs, the ones train.py reads itself, file system directories), by
# the field that names it: each must be normalized before its prefix means anything.
LOCATIONS = (
    '[{"field": "CheckpointConfig.S3Uri", "path": $r.CheckpointConfig.S3Uri}, '
    '{"field": "OutputDataConfig.S3OutputPath", "path": $r.OutputDataConfig.S3OutputPath}, '
    '{"field": "TensorBoardOutputConfig.S3OutputPath", "path": $r.TensorBoardOutputConfig.S3OutputPath}, '
    + ", ".join(
        f'{{"field": "HyperParameters.{name}", "path": $lookup($r.HyperParameters, {literal(name)})}}'
        for name in ("checkpoint_dir", RESUME_FROM_HYPERPARAMETER)
    )
    + ', $map([$r.InputDataConfig], function($c) { {"field": "InputDataConfig (channel " & $c.ChannelName '
    '& ")", "path": $exists($c.DataSource.S3DataSource) ? $c.DataSource.S3DataSource.S3Uri : '
    "$c.DataSource.FileSystemDataSource.DirectoryPath} })]"
)


def location_rules(named: bool) -> list[tuple[str, str]]:
    """The job's name and where it reads and writes. named=False: TrainingJobName may be left out (the
    registration machine names its jobs itself)."""
    unnamed = "" if named else "$exists($r.TrainingJobName) and "
    channels = "[$r.InputDataConfig]"
    s3_channel = "$exists($c.DataSource.S3DataSource)"
    fsx_channel = "$exists($c.DataSource.FileSystemDataSource)"
    fsx = "$c.DataSource.FileSystemDataSource"
    return [
        (
            "$count($unnormalized) > 0",
            '$unnormalized[0].field & " must be a normalized location, with no . or .. segment and no //; it '
            'is " & $unnormalized[0].path & "."',
        ),
        (
            f"{unnamed}$not($under($r.TrainingJobName, [$g.jobNamePrefix]))",
            '"TrainingJobName must start with " & $g.jobNamePrefix & "."',
        ),
        (
            "$exists($r.CheckpointConfig) and $not($under($r.CheckpointConfig.S3Uri, [$g.checkpoints]))",
            '"CheckpointConfig.S3Uri must lie under " & $g.checkpoints & "."',
        ),
        # A directory bucket's checkpoint_dir first, for its own sentence (the team's bucket or none).
        (
            f'($d := $r.HyperParameters.checkpoint_dir; $type($d) = "string" and '
            f"$contains($d, {regex_literal(DIRECTORY_BUCKET_URI)}) and "
            "$not($g.expressCheckpoints and $under($d, [$g.expressCheckpoints])))",
            '"HyperParameters.checkpoint_dir: " & ($g.expressCheckpoints ? "a directory bucket location '
            'must lie under " & $g.expressCheckpoints & "." : "no directory bucket is allowed: no profile '
            'of the pipeline uses the s3-express store.")',
        ),
        *_train_py_location_rules(),
        *_code_rules(),
        (
            "$not($under($r.OutputDataConfig.S3OutputPath, [$g.artifacts]))",
            '"OutputDataConfig.S3OutputPath must lie under " & $g.artifacts & "."',
        ),
        (
            "$exists($r.TensorBoardOutputConfig) and "
            "$not($under($r.TensorBoardOutputConfig.S3OutputPath, [$g.artifacts]))",
            '"TensorBoardOutputConfig.S3OutputPath must lie under " & $g.artifacts & "."',
        ),
        (
            f"$count($filter({channels}, function($c) {{ {s3_channel} = {fsx_channel} }})) > 0",
            "\"InputDataConfig: every channel must read from S3 (S3DataSource) or the project's file system "
            '(FileSystemDataSource)."',
        ),
        (
            f"$count($filter({channels}, function($c) {{ {s3_channel} and "
            "$not($under($c.DataSource.S3DataSource.S3Uri, $g.channels)) })) > 0",
            '"InputDataConfig: an S3DataSource.S3Uri must lie under one of " & $list($g.channels) & "."',
        ),
        (
            f"$count($filter({channels}, function($c) {{ {fsx_channel} and $not($g.fileSystem and "
            f'{fsx}.FileSystemId = $g.fileSystem.id and $type({fsx}.DirectoryPath) = "string" and '
            f"({fsx}.DirectoryPath in $g.fileSystem.directoryPaths or $under({fsx}.DirectoryPath, "
            '[$map($g.fileSystem.directoryPaths, function($d) { $d & "/" })]))) })) > 0',
            '"InputDataConfig: " & ($g.fileSystem ? "a FileSystemDataSource must be file system " & '
            '$g.fileSystem.id & " with its DirectoryPath under one of " & '
            '$list($g.fileSystem.directoryPaths) & "." : '
            '"no FileSystemDataSource is allowed: the project has no file system.")',
        ),
    ]


def _train_py_location_rules() -> list[tuple[str, str]]:
    """Where train.py itself checkpoints and resumes from, when the request names it (stores other than
    sagemaker-sync): under the table's prefixes, and no `..` (the fsx store's directory is a path)."""
    rules = []
    no_parent = literal("..")
    named = (("checkpoint_dir", "checkpointDirs"), (RESUME_FROM_HYPERPARAMETER, "resumeSources"))
    for name, allowed in named:
        value, places = f"$lookup($r.HyperParameters, {literal(name)})", f"$g.{allowed}"
        refuses = f"$exists({value}) and ($not($under({value}, {places})) or $contains({value}, {no_parent}))"
        cause = (
            f'"HyperParameters.{name} must lie under " & ($count({places}) > 0 ? "one of " & $list({places}) '
            f': "nothing: no profile reads it") & ", with no " & {no_parent} & "."'
        )
        rules.append((refuses, cause))
    return rules


def foreign_run_rules() -> list[tuple[str, str]]:
    """A team that inherits the pre-teams runs reads `<project>-*`, but never another team's runs in it."""
    reads = (
        "$append([$r.InputDataConfig.DataSource.S3DataSource.S3Uri], "
        f"[$lookup($r.HyperParameters, {literal(RESUME_FROM_HYPERPARAMETER)})])"
    )
    return [
        (
            f"$count($filter({reads}, function($u) {{ $under($u, $g.foreignRuns) }})) > 0",
            '"InputDataConfig and HyperParameters.resume_from must not lie under another team\'s runs: " & '
            '$list($g.foreignRuns) & "."',
        )
    ]


def _code_rules() -> list[tuple[str, str]]:
    """The toolkit runs what `sagemaker_submit_directory` names (any S3 URI the job's role reads, or a path in
    the image) and `sagemaker_program` from it: the code only from the team's prefix, at a digest's address,
    and the program a relative path that stays in /opt/ml/code. Both are JSON-encoded (team_code)."""
    submit = f"$lookup($r.HyperParameters, {literal(SUBMIT_DIRECTORY_HYPERPARAMETER)})"
    program = f"$lookup($r.HyperParameters, {literal(PROGRAM_HYPERPARAMETER)})"
    address = regex_literal(DIGEST_PATTERN.removesuffix("$") + "/" + BUNDLE_NAME.replace(".", "\\.") + '"$')
    entry = regex_literal('^"' + ENTRY_PATTERN.removeprefix("^").removesuffix("$") + '"$')
    return [
        (
            f'$exists({submit}) and $not($type({submit}) = "string" and '
            f'$substring({submit}, 0, $length($g.code) + 1) = "\\"" & $g.code and '
            f"$contains($substring({submit}, $length($g.code) + 1), {address}))",
            f'"HyperParameters.{SUBMIT_DIRECTORY_HYPERPARAMETER} must be the team\'s code, " & $g.code & '
            f'"<sha256: 64 hex digits>/{BUNDLE_NAME} as a JSON string."',
        ),
        (
            f'$exists({program}) and $not($type({program}) = "string" and $contains({program}, {entry}) and '
            f"$normalized($substring({program}, 1, $length({program}) - 2)))",
            f'"HyperParameters.{PROGRAM_HYPERPARAMETER} must be a relative path to a .py or .sh file as a '
            'JSON string, with no . or .. segment and no //."',
        ),
    ]
