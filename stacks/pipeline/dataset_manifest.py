"""A reusable chain of JSONata states that computes a training set's manifest in Step Functions, for a prefix
of any size up to a documented bound.

    manifest = DatasetManifest(self, "Manifest", project=project, bucket=dataset_bucket,
                               prefix=literal("datasets/a/"), listed_prefixes=["datasets/a/"])
    chain = before.next(manifest).next(after)       # after reads $datasetManifest

It assigns `$datasetManifest = {"hash", "objects", "bytes"}`: the chained hash trainstack.manifest defines
(the same value `prefix_manifest()` computes with boto3), the object count and the byte total. The pages
are listed by the stack's child machine `<project>-dataset-manifest` (manifest_listing.py), started in
turn with startExecution.sync:2, each execution listing up to PAGES_PER_EXECUTION ListObjectsV2 pages of
200 objects from where the one before stopped (its continuation token and manifest so far): the chain
stays sequential and each history stays under Step Functions' 25,000 events. The caller's history grows
by 8 events an execution (`<id>Pages`' 6 with TaskSubmitted, `<id>MorePages`' 2) plus 4 (`<id>Start`,
`<id>Done`): 12 for a prefix of up to 600,000 objects, 4,004 at the bound of MAX_EXECUTIONS executions
(1,500,000 pages, 300,000,000 objects). Past the bound the listing fails with `DatasetTooLarge`.

States (names start with the construct id): `<id>Start` (Pass), `<id>Pages` (the child execution),
`<id>MorePages` (Choice), `<id>Done` (Pass; clears the page token). Errors: a missing bucket fails with
`S3.NoSuchBucketException` (modelled in S3's API); any other S3 error (`S3.S3Exception`, throttling
included) after 5 attempts, `DatasetTooLarge` past the bound, or a refused child start
(`StepFunctions.ExecutionLimitExceeded`, after its retries) fail the listing: the caller decides with
`add_catch`, whose `assign` reads the error in `$states.errorOutput` as before, the child's own error
and cause and not the `States.TaskFailed` that wraps them.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline import manifest_listing
from stacks.pipeline.attempt.attempt_start import start_attempt
from stacks.pipeline.jsonata_text import expression, literal
from trainstack.manifest import EMPTY_MANIFEST

MANIFEST_VARIABLE = "datasetManifest"
_ERROR = "$states.errorOutput"
# A failed child execution fails the task with States.TaskFailed, the child's DescribeExecution as JSON in
# the cause (Error and Cause as .sync:2 names them: moto's copy of LocalStack's interpreter, recorded
# against AWS, state_task_service_sfn.py); any other error (a refused start) is the task's own.
_LISTING_ERROR = (
    f'($caught := {_ERROR}; $child := $caught.Error = "States.TaskFailed" and '
    '$substring($caught.Cause, 0, 1) = "{" ? $parse($caught.Cause) : {}; '
    '$child.Error ? {"Error": $child.Error, "Cause": $child.Cause ? $child.Cause : ""} : $caught)'
)


class DatasetManifest(sfn.StateMachineFragment):
    """ListObjectsV2 pages of `prefix` (a JSONata expression) in `bucket` -> `$datasetManifest`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        bucket: s3.IBucket,
        prefix: str,
        listed_prefixes: Sequence[str],
        bucket_name: str | None = None,
        before_each_listing: sfn.TaskStateBase | None = None,
    ) -> None:
        """`listed_prefixes`: every value `prefix` can take; IAM lets the child list no other (with teams,
        no other team's dataset).
        `bucket_name`: what the child's input names instead of bucket.bucket_name (e.g. a `${Name}`
        placeholder that the caller's DefinitionSubstitutions fill); IAM always grants on `bucket`.
        `before_each_listing`: a state run before each child execution (the trigger renews its lease
        there); its errors are the caller's to catch."""
        super().__init__(scope, construct_id)
        listing = manifest_listing.manifest_listing(scope, project, bucket.bucket_arn, listed_prefixes)
        start = sfn.Pass.jsonata(
            self,
            f"{construct_id}Start",
            assign={
                MANIFEST_VARIABLE: expression(literal(EMPTY_MANIFEST.as_dict())),
                "manifestPageToken": expression("''"),
                "manifestListings": 0,
            },
        )
        last = manifest_listing.MAX_EXECUTIONS - 1
        self._pages = start_attempt(
            self,
            f"{construct_id}Pages",
            attempt_machine=listing.state_machine,
            name='"manifest-" & $uuid()',
            attempt_input={
                "bucket": bucket_name or bucket.bucket_name,
                "prefix": expression(prefix),
                "token": expression("$manifestPageToken"),
                "manifest": expression(f"${MANIFEST_VARIABLE}"),
                "pages": manifest_listing.PAGES_PER_EXECUTION,
                "last": expression(f"$manifestListings >= {last}"),
            },
            assign={
                MANIFEST_VARIABLE: expression("$states.result.Output.manifest"),
                "manifestPageToken": expression("$states.result.Output.token"),
                "manifestListings": expression("$manifestListings + 1"),
            },
            comment="The next range of ListObjectsV2 pages, in a child execution of its own.",
            # The fragment hands its input on unchanged: callers read $datasetManifest.
            outputs=expression("$states.input"),
        )
        self._done = sfn.Pass.jsonata(
            self, f"{construct_id}Done", assign={"manifestPageToken": expression("null")}
        )
        next_range = self._pages if before_each_listing is None else before_each_listing.next(self._pages)
        more = sfn.Choice.jsonata(self, f"{construct_id}MorePages").when(
            sfn.Condition.jsonata(expression("$manifestPageToken != ''")), next_range
        )
        start.next(next_range)
        self._pages.next(more)
        more.otherwise(self._done)
        self._start = start

    def add_catch(self, handler: sfn.IChainable, *, assign: dict[str, str]) -> None:
        """Any error of the listing (after its retries) goes to `handler`, with `assign` made: there
        `$states.errorOutput` is the listing's error (a child's own, unwrapped)."""
        self._pages.add_catch(
            handler,
            errors=["States.ALL"],
            outputs={},
            assign={name: value.replace(_ERROR, _LISTING_ERROR) for name, value in assign.items()},
        )

    @property
    def start_state(self) -> sfn.State:
        return self._start

    @property
    def end_states(self) -> list[sfn.INextable]:
        return [self._done]
