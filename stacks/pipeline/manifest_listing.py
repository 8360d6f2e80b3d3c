"""The dataset manifest's child machine `<project>-dataset-manifest` (one per pipeline stack): it lists a
range of ListObjectsV2 pages of a prefix and chains the manifest over them (trainstack.manifest), so that
no execution's history holds more pages than it can.

Input: {"bucket", "prefix", "token" (the continuation token to start from, "" for the first page),
"manifest" (the manifest so far: {hash, objects, bytes}), "pages" (how many pages at most), "last"
(true when no execution follows: a prefix longer than this range is too large)}. Output: {"manifest",
"token"} ("" once the prefix is listed). A prefix still unlisted at the end of the last range fails the
execution with `DatasetTooLarge`.

Narrow pages: a page of 200 objects stays under Step Functions' 262,144-byte limit for a task's result
while its keys stay short once written as JSON (200 keys of 1,024 ASCII bytes: 237,944 bytes in the
emulator); keys of quotes, backslashes or control characters take 2 to 6 bytes a byte in JSON, and
whether AWS measures non-ASCII escaped is not documented. A page whose result is too large
(`States.DataLimitExceeded`, which a catcher naming it matches: limits.py's sources) is listed again from
the same token as a page of NARROW_PAGE_SIZE = 32 (32 keys of 1,024 bytes at 6 bytes each plus every other
field: ~215,000 bytes), and counts as two of the range's pages.

History (counted, tests/pipeline/test_dataset_manifest.py): ExecutionStarted, `Begin` (2), `HasToken` (2),
7 a page (the list Task's 5, `MorePages`' 2), `Done` (2), ExecutionSucceeded: 8 + 7 x pages; a narrow page
12 (the refused Task's 5, the narrow Task's 5, `MorePages`' 2), within the 14 of the two pages it counts
as. A range of
PAGES_PER_EXECUTION = 3,000 pages holds 21,008 events of the 25,000 (a Retry adds 3: ~1,300 retries fit).
The DatasetManifest fragment (dataset_manifest.py) starts up to MAX_EXECUTIONS = 500 of them in turn:
1,500,000 pages, 300,000,000 objects at S3's full pages of 200 (fewer where pages are narrow), for 8
events each in the caller's history.

Errors: S3's (`S3.NoSuchBucketException`, `S3.S3Exception` after 5 attempts) and `DatasetTooLarge` fail the
execution with that error; the caller sees the child's error and cause (dataset_manifest.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.pipeline.jsonata_text import expression
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import retry_poll_call
from stacks.validation import acknowledge
from trainstack.manifest import PAGE_SIZE

# Pages one execution lists: 8 + 7 x 3,000 = 21,008 history events (module docstring).
PAGES_PER_EXECUTION = 3_000
# Executions one manifest starts: 8 events each in the caller's history, 4,004 with the fragment's 4.
MAX_EXECUTIONS = 500
# A page listed again after its result passed the payload limit (module docstring); it counts as 2 pages.
NARROW_PAGE_SIZE = 32
NARROW_PAGE_COST = 2
ERROR_DATASET_TOO_LARGE = "DatasetTooLarge"
DATA_LIMIT_ERROR = "States.DataLimitExceeded"
S3_ERROR = "S3.S3Exception"
_CONSTRUCT_ID = "DatasetManifestListing"
# Each object chains the digest once; ETags lose their quotes (trainstack.manifest.chained_digest).
_CHAIN = (
    "$reduce($page, function($digest, $object) "
    '{ $hash($digest & $object.Key & "\\t" & $replace($object.ETag, "\\"", "") & "\\n", "SHA-256") }, '
    "$before.hash)"
)


class _Page(NamedTuple):
    full: tasks.CallAwsService
    narrow: tasks.CallAwsService


# Step Functions' and S3's time for one page (a Task, a Choice, one ListObjectsV2 call): **assumed**, not
# measured on AWS. It sizes the trigger machine's timeout beyond its lease (retrain_trigger.py).
SECONDS_PER_PAGE = 0.2


def max_pages() -> int:
    return PAGES_PER_EXECUTION * MAX_EXECUTIONS


def max_listing_seconds() -> int:
    """How long a listing up to the bound may take, at SECONDS_PER_PAGE."""
    return round(max_pages() * SECONDS_PER_PAGE)


def page_manifest(before: str) -> str:
    """JSONata: the manifest after the page in $states.result, given the one before it (`before`)."""
    return (
        f"($before := {before}; $page := $states.result.Contents[]; $exists($page) ? "
        f'{{"hash": {_CHAIN}, "objects": $before.objects + $count($page), '
        '"bytes": $before.bytes + $sum($page.Size)} : $before)'
    )


def manifest_listing(
    scope: Construct, project: str, bucket_arn: str, prefixes: Sequence[str]
) -> ManifestListing:
    """The stack's child machine (made by its first user), allowed to list `prefixes` of `bucket_arn`."""
    stack = cdk.Stack.of(scope)
    found = stack.node.try_find_child(_CONSTRUCT_ID)
    if not isinstance(found, ManifestListing):
        found = ManifestListing(stack, _CONSTRUCT_ID, project, bucket_arn)
    found.allow_listing(bucket_arn, prefixes)
    return found


class ManifestListing(Construct):
    """`state_machine`, listing the buckets its callers name (`bucket_arn`, then `allow_listing`)."""

    def __init__(self, scope: Construct, construct_id: str, project: str, bucket_arn: str) -> None:
        super().__init__(scope, construct_id)
        self._buckets = [bucket_arn]
        # The prefixes the callers list (of the dataset bucket, which callers may name by different
        # references), and the statement that refuses any other on every bucket listed.
        self._prefixes: set[str] = set()
        self._other_prefixes = iam.PolicyStatement(effect=iam.Effect.DENY, actions=["s3:ListBucket"])
        begin = sfn.Pass.jsonata(
            self,
            "Begin",
            assign={
                "listing": expression("$states.input"),
                "manifest": expression("$states.input.manifest"),
                "token": expression("$states.input.token"),
                "pagesLeft": expression("$states.input.pages"),
            },
        )
        first, following = (
            self._page("FirstPage", {}),
            self._page("NextPage", {"ContinuationToken": expression("$token")}),
        )
        done = sfn.Succeed.jsonata(
            self, "Done", outputs=expression('{"manifest": $manifest, "token": $token}')
        )
        too_large = sfn.Fail.jsonata(
            self,
            "TooLarge",
            error=ERROR_DATASET_TOO_LARGE,
            cause=expression(
                '"s3://" & $listing.bucket & "/" & $listing.prefix & " holds more than " '
                '& $string($manifest.objects) & " objects: a dataset manifest lists at most '
                f"{max_pages():,} ListObjectsV2 pages of {PAGE_SIZE} objects ({MAX_EXECUTIONS} executions "
                f"of {PAGES_PER_EXECUTION:,} pages; a page of {NARROW_PAGE_SIZE}, listed where {PAGE_SIZE} "
                f'keys exceed the 256 KiB result limit, counts as {NARROW_PAGE_COST})"'
            ),
        )
        more = (
            sfn.Choice.jsonata(self, "MorePages")
            .when(sfn.Condition.jsonata(expression("$token != '' and $pagesLeft > 0")), following.full)
            .when(sfn.Condition.jsonata(expression("$token != '' and $listing.last")), too_large)
            .otherwise(done)
        )
        for page in (first, following):
            page.full.next(more)
            page.narrow.next(more)
        has_token = (
            sfn.Choice.jsonata(self, "HasToken")
            .when(sfn.Condition.jsonata(expression("$token != ''")), following.full)
            .otherwise(first.full)
        )
        self.state_machine, self.log_group = logged_state_machine(
            self,
            "StateMachine",
            name=f"{project}-dataset-manifest",
            chain=begin.next(has_token),
            timeout=None,
        )
        acknowledge(
            self.state_machine.role,
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery and X-Ray actions (added by CDK for logging and tracing) support no "
            "resource-level permissions.",
        )

    def allow_listing(self, bucket_arn: str, prefixes: Sequence[str]) -> None:
        """ListObjectsV2 of `prefixes` of `bucket_arn` too: the grants name exactly the callers' buckets,
        and a Deny refuses any other prefix (with teams, another team's dataset; the list tasks' own grant
        carries no condition)."""
        if bucket_arn not in self._buckets:
            self._buckets.append(bucket_arn)
            self.state_machine.add_to_role_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn])
            )
        first = not self._other_prefixes.resources
        if bucket_arn not in self._other_prefixes.resources:
            self._other_prefixes.add_resources(bucket_arn)
        if first:
            self.state_machine.add_to_role_policy(self._other_prefixes)
        self._prefixes.update(prefixes)
        # Absent s3:prefix (a listing of the whole bucket) matches StringNotLike too: refused.
        self._other_prefixes.add_condition(
            "StringNotLike", {"s3:prefix": [f"{prefix}*" for prefix in sorted(self._prefixes)]}
        )

    def _page(self, state_id: str, token: dict[str, str]) -> _Page:
        """A page of PAGE_SIZE, listed again from the same token as a narrow one when its result is too
        large."""
        full = self._list(state_id, token, PAGE_SIZE, 1)
        narrow = self._list(f"{state_id}Narrow", token, NARROW_PAGE_SIZE, NARROW_PAGE_COST)
        full.add_catch(narrow, errors=[DATA_LIMIT_ERROR], outputs={})
        return _Page(full, narrow)

    def _list(self, state_id: str, token: dict[str, str], max_keys: int, cost: int) -> tasks.CallAwsService:
        task = tasks.CallAwsService.jsonata(
            self,
            state_id,
            service="s3",
            action="listObjectsV2",
            parameters={
                "Bucket": expression("$listing.bucket"),
                "Prefix": expression("$listing.prefix"),
                "MaxKeys": max_keys,
                **token,
            },
            # ListObjectsV2 is authorized as s3:ListBucket on the bucket (Service Authorization Reference,
            # Amazon S3): the first caller's here, the others' by allow_listing.
            iam_action="s3:ListBucket",
            iam_resources=list(self._buckets),
            assign={
                "manifest": expression(page_manifest("$manifest")),
                "token": expression(
                    "$states.result.IsTruncated = true ? $states.result.NextContinuationToken : ''"
                ),
                "pagesLeft": expression(f"$pagesLeft - {cost}"),
            },
            outputs={},
        )
        retry_poll_call(task, [S3_ERROR])
        return task
