"""A reusable chain of JSONata states that computes a training set's manifest in Step Functions.

    manifest = DatasetManifest(self, "Manifest", bucket=dataset_bucket, prefix=literal("datasets/a/"))
    chain = before.next(manifest).next(after)       # after reads $datasetManifest

It lists the prefix with ListObjectsV2 (aws-sdk:s3:listObjectsV2), PAGE_SIZE objects a page, and assigns
`$datasetManifest = {"hash", "objects", "bytes"}`: the chained hash trainstack.manifest defines (the same
value `prefix_manifest()` computes with boto3), the object count and the byte total. Each page updates
the running digest and is then dropped, so no state carries more than one page, whatever the prefix
holds. History: 7 events a page plus 2 (the last Choice, Done); a standard execution's 25,000 events
hold about 3,500 pages (700,000 objects): past that, run it in a child execution of its own.

States (names start with the construct id): `<id>FirstPage`, `<id>NextPage` (the list calls),
`<id>MorePages` (Choice), `<id>Done` (Pass; clears the page token). Errors: a missing bucket fails the
state with `S3.NoSuchBucketException` (modelled in S3's API); any other S3 error (`S3.S3Exception`,
throttling included) is retried 5 times and then fails the state: the caller decides with `add_catch`.
"""

from __future__ import annotations

from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.machine_kit import retry_poll_call
from trainstack.manifest import EMPTY_MANIFEST, PAGE_SIZE

MANIFEST_VARIABLE = "datasetManifest"
S3_ERROR = "S3.S3Exception"
# Each object chains the digest once; ETags lose their quotes (trainstack.manifest.chained_digest).
_CHAIN = (
    "$reduce($page, function($digest, $object) "
    '{ $hash($digest & $object.Key & "\\t" & $replace($object.ETag, "\\"", "") & "\\n", "SHA-256") }, '
    "$before.hash)"
)


def page_manifest(before: str) -> str:
    """JSONata: the manifest after the page in $states.result, given the one before it (`before`)."""
    return (
        f"($before := {before}; $page := $states.result.Contents[]; $exists($page) ? "
        f'{{"hash": {_CHAIN}, "objects": $before.objects + $count($page), '
        '"bytes": $before.bytes + $sum($page.Size)} : $before)'
    )


class DatasetManifest(sfn.StateMachineFragment):
    """ListObjectsV2 pages of `prefix` (a JSONata expression) in `bucket` -> `$datasetManifest`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        prefix: str,
        bucket_name: str | None = None,
    ) -> None:
        """`bucket_name`: what the requests name instead of bucket.bucket_name (e.g. a `${Name}` placeholder
        that the machine's DefinitionSubstitutions fill); IAM always grants on `bucket`."""
        super().__init__(scope, construct_id)
        self._bucket_name = bucket_name or bucket.bucket_name
        first = self._list(f"{construct_id}FirstPage", bucket, prefix, literal(EMPTY_MANIFEST.as_dict()))
        following = self._list(
            f"{construct_id}NextPage",
            bucket,
            prefix,
            f"${MANIFEST_VARIABLE}",
            {"ContinuationToken": expression("$manifestPageToken")},
        )
        self._done = sfn.Pass.jsonata(
            self, f"{construct_id}Done", assign={"manifestPageToken": expression("null")}
        )
        more = sfn.Choice.jsonata(self, f"{construct_id}MorePages").when(
            sfn.Condition.jsonata(expression("$manifestPageToken != ''")), following
        )
        first.next(more)
        following.next(more)
        more.otherwise(self._done)
        self._start, self._calls = first, (first, following)

    def add_catch(self, handler: sfn.IChainable, *, assign: dict[str, str]) -> None:
        """Any error of a list call (after its retries) goes to `handler`, with `assign` made."""
        for call in self._calls:
            call.add_catch(handler, errors=["States.ALL"], outputs={}, assign=assign)

    @property
    def start_state(self) -> sfn.State:
        return self._start

    @property
    def end_states(self) -> list[sfn.INextable]:
        return [self._done]

    def _list(
        self,
        state_id: str,
        bucket: s3.IBucket,
        prefix: str,
        before: str,
        token: dict[str, str] | None = None,
    ) -> tasks.CallAwsService:
        task = tasks.CallAwsService.jsonata(
            self,
            state_id,
            service="s3",
            action="listObjectsV2",
            parameters={
                "Bucket": self._bucket_name,
                "Prefix": expression(prefix),
                "MaxKeys": PAGE_SIZE,
                **(token or {}),
            },
            # ListObjectsV2 is authorized as s3:ListBucket on the bucket (Service Authorization Reference).
            iam_action="s3:ListBucket",
            iam_resources=[bucket.bucket_arn],
            assign={
                MANIFEST_VARIABLE: expression(page_manifest(before)),
                "manifestPageToken": expression(
                    "$states.result.IsTruncated = true ? $states.result.NextContinuationToken : ''"
                ),
            },
            # The fragment hands its input on unchanged: callers read $datasetManifest.
            outputs=expression("$states.input"),
        )
        retry_poll_call(task, [S3_ERROR])
        return task
