"""A team's read path to its own runs: the Express state machine `<namespace>-run-reader`.

`trainstack status`, `logs`, `report` and `runs` need DescribeTrainingJob, the jobs' CloudWatch logs and, in
queue mode, Batch's service jobs. None of these can be granted to one team by IAM alone: SageMaker writes
every job's logs to the one group `/aws/sagemaker/TrainingJobs` (CreateTrainingJob takes no log group), and
`logs:FilterLogEvents` is authorized on the log group, not on its streams; Batch names every team's
training jobs `AWSBatch<queue key>...`; `batch:ListServiceJobs` and `batch:DescribeServiceJob` support no
resource types (Service Authorization Reference). So the team's start policy grants only
`states:StartSyncExecution` on this machine, whose role reads, and which answers only about the team's own
runs:

- a training job (`describeTrainingJob`, `filterLogEvents`) whose `RoleArn` is the team's SageMaker execution
  role: only the team's machines pass it (iam:PassRole in direct mode; in queue mode the team's attempt
  machine, whose request check refuses any other role, is the only one that submits it);
- the training jobs of a run name in the team's namespace (`listTrainingJobs`: only names that start with
  the run's name; no other team's run is named so, by its input rules);
- service jobs in the team's share (`listServiceJobs`, `describeServiceJob`): only the team's machines may
  submit into it (batch:ShareIdentifier on SubmitServiceJob);
- the front of the queue with every job ARN but the ones asked about blanked (`getJobQueueSnapshot`):
  positions, never another team's job.

Anything else ends the execution with `NotTheTeamsRun` (one sentence in the cause), an unknown call with
`UnknownCall`; an AWS error is the task's own (`SageMaker.ResourceNotFoundException`, ...). The CLI
(trainstack/run_reader.py) starts it with StartSyncExecution and reads the answer as boto3 would.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.pipeline.jsonata_text import expression, literal
from stacks.pipeline.logged_state_machine import logged_state_machine
from stacks.pipeline.machine_kit import literal_partition
from stacks.pipeline.queue.training_queue import TrainingQueue, batch_training_job_arns
from stacks.validation import acknowledge
from stacks.wildcard_acknowledgments import acknowledge_wildcard_statements
from trainstack.run_reader import (
    CALLS,
    LOG_PAGE_LIMIT,
    NOT_THE_TEAMS_RUN,
    SERVICE_JOB_PAGE_LIMIT,
    UNKNOWN_CALL,
    run_reader_name,
)
from trainstack.runs import TRAINING_LOG_GROUP
from trainstack.teams import Team

# The call, read in every state: a state's own input ($states.input) is the output of the state before.
_INPUT = "$states.context.Execution.Input"
_OWN_ROLE = "${SageMakerRoleArn}"  # the team's SageMaker execution role (DefinitionSubstitutions)


class RunReader(Construct):
    """`state_machine`: the team's reader; `queue_name`/`job_queue_arn` only in queue mode."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        namespace: str,
        sagemaker_role: iam.IRole,
        queue_name: str | None,
        job_queue_arn: str | None,
        share: str | None,
    ) -> None:
        """`queue_name`, `job_queue_arn` and `share` (the team's share identifier): queue mode only."""
        super().__init__(scope, construct_id)
        self._namespace = namespace
        name = run_reader_name(namespace)
        asked = (
            f"$string({_INPUT}.jobName ? {_INPUT}.jobName : "
            f"({_INPUT}.runName ? {_INPUT}.runName : {_INPUT}.jobId))"
        )
        refused = sfn.Fail.jsonata(
            self,
            "NotTheTeamsRun",
            error=NOT_THE_TEAMS_RUN,
            cause=expression(f'{asked} & " is not a run of {namespace}, nor one of its jobs"'),
        )
        unknown = sfn.Fail.jsonata(
            self,
            "UnknownCall",
            error=UNKNOWN_CALL,
            cause=expression(f'"call must be one of {", ".join(CALLS)}; got " & $string({_INPUT}.call)'),
        )
        route = sfn.Choice.jsonata(self, "Route")
        route.when(self._is_call("describeTrainingJob", "filterLogEvents"), self._training_job(refused))
        route.when(
            self._is_call("listTrainingJobs"), self._own_run("Jobs", self._list_training_jobs(), refused)
        )
        if queue_name is not None and job_queue_arn is not None and share is not None:
            route.when(self._is_call("listServiceJobs"), self._list_service_jobs(job_queue_arn, share))
            route.when(self._is_call("describeServiceJob"), self._service_job(share, refused))
            route.when(self._is_call("getJobQueueSnapshot"), self._queue_snapshot(job_queue_arn))
        route.otherwise(unknown)
        self.state_machine, _ = logged_state_machine(
            self,
            "Machine",
            name=name,
            chain=route,
            timeout=None,  # AWS ends an Express execution after 5 minutes
            express=True,
            definition_substitutions={"SageMakerRoleArn": sagemaker_role.role_arn},
        )
        self._grant(queue_name, job_queue_arn)

    def _is_call(self, *calls: str) -> sfn.Condition:
        return sfn.Condition.jsonata(expression(f"{_INPUT}.call in {literal(list(calls))}"))

    def _own_run(self, what: str, then: sfn.IChainable, refused: sfn.IChainable) -> sfn.Choice:
        """A run name in the team's namespace: no other team's run is named so (its input rules)."""
        prefix = f"{self._namespace}-"
        run = f"{_INPUT}.runName"
        owned = f'$type({run}) = "string" and $substring({run}, 0, {len(prefix)}) = "{prefix}"'
        return (
            sfn.Choice.jsonata(self, f"OwnRun{what}")
            .when(sfn.Condition.jsonata(expression(owned)), then)
            .otherwise(refused)
        )

    def _task(
        self, state_id: str, service: str, action: str, arguments: str, **fields: object
    ) -> sfn.CustomState:
        """An aws-sdk call whose request is one JSONata value (optional members left out, not null)."""
        return sfn.CustomState(
            self,
            state_id,
            state_json={
                "Type": "Task",
                "Resource": f"arn:{literal_partition(self)}:states:::aws-sdk:{service}:{action}",
                "Arguments": expression(arguments),
                **fields,
            },
        )

    def _training_job(self, refused: sfn.IChainable) -> sfn.IChainable:
        describe = self._task(
            "DescribeJob",
            "sagemaker",
            "describeTrainingJob",
            f'{{"TrainingJobName": {_INPUT}.jobName}}',
            Assign={"job": expression("$states.result")},
        )
        limit = f"{_INPUT}.limit"
        logs_page = self._task(
            "FilterLogEvents",
            "cloudwatchlogs",
            "filterLogEvents",
            # The exact job's streams (`<job>/algo-<n>-<id>`): the prefix ends with its slash.
            f'$merge([{{"LogGroupName": "{TRAINING_LOG_GROUP}", '
            '"LogStreamNamePrefix": $job.TrainingJobName & "/", '
            f'"Limit": ($type({limit}) = "number" and {limit} >= 1 and {limit} < {LOG_PAGE_LIMIT}) '
            f"? $floor({limit}) : {LOG_PAGE_LIMIT}}}, "
            f'$type({_INPUT}.nextToken) = "string" ? {{"NextToken": {_INPUT}.nextToken}} : {{}}, '
            f'$type({_INPUT}.startTime) = "number" ? {{"StartTime": {_INPUT}.startTime}} : {{}}])',
            Output=expression('$merge([{"Events": []}, $states.result])'),
            End=True,
        )
        description = sfn.Pass.jsonata(self, "JobDescription", outputs=expression("$job"))
        return describe.next(
            sfn.Choice.jsonata(self, "OwnJob")
            .when(
                sfn.Condition.jsonata(
                    expression(f'$job.RoleArn = "{_OWN_ROLE}" and {_INPUT}.call = "filterLogEvents"')
                ),
                logs_page,
            )
            .when(sfn.Condition.jsonata(expression(f'$job.RoleArn = "{_OWN_ROLE}"')), description)
            .otherwise(refused)
        )

    def _list_training_jobs(self) -> sfn.IChainable:
        return self._task(
            "ListTrainingJobs",
            "sagemaker",
            "listTrainingJobs",
            f'{{"NameContains": {_INPUT}.runName, "SortBy": "CreationTime", "SortOrder": "Descending", '
            '"MaxResults": 100}',
            # NameContains matches anywhere in a name: keep the run's own jobs, `<run>-<attempt>`.
            Output=expression(
                '{"TrainingJobSummaries": [$states.result.TrainingJobSummaries['
                f'$substring(TrainingJobName, 0, $length({_INPUT}.runName) + 1) = {_INPUT}.runName & "-"]]}}'
            ),
            End=True,
        )

    def _list_service_jobs(self, job_queue_arn: str, share: str) -> sfn.IChainable:
        """A page of the service jobs named `prefix*`, keeping the team's share's: only the team's machines
        may submit into it (batch:ShareIdentifier on SubmitServiceJob)."""
        return self._task(
            "ListServiceJobs",
            "batch",
            "listServiceJobs",
            f'$merge([{{"JobQueue": "{job_queue_arn}", "MaxResults": {SERVICE_JOB_PAGE_LIMIT}, '
            f'"Filters": [{{"Name": "JOB_NAME", "Values": [$string({_INPUT}.prefix) & "*"]}}]}}, '
            f'$type({_INPUT}.nextToken) = "string" ? {{"NextToken": {_INPUT}.nextToken}} : {{}}])',
            Output=expression(
                f'{{"JobSummaryList": [$states.result.JobSummaryList[ShareIdentifier = "{share}"]], '
                '"NextToken": $states.result.NextToken}'
            ),
            End=True,
        )

    def _service_job(self, share: str, refused: sfn.IChainable) -> sfn.IChainable:
        describe = self._task(
            "DescribeServiceJob",
            "batch",
            "describeServiceJob",
            f'{{"JobId": $string({_INPUT}.jobId)}}',
            Assign={"serviceJob": expression("$states.result")},
        )
        return describe.next(
            sfn.Choice.jsonata(self, "OwnServiceJob")
            .when(
                sfn.Condition.jsonata(expression(f'$serviceJob.ShareIdentifier = "{share}"')),
                sfn.Pass.jsonata(self, "ServiceJobDescription", outputs=expression("$serviceJob")),
            )
            .otherwise(refused)
        )

    def _queue_snapshot(self, job_queue_arn: str) -> sfn.IChainable:
        blanked = (
            "$states.result.FrontOfQueue.Jobs.{"
            f'"JobArn": JobArn in {_INPUT}.jobArns ? JobArn : "", '
            '"EarliestTimeAtPosition": EarliestTimeAtPosition}'
        )
        return self._task(
            "QueueSnapshot",
            "batch",
            "getJobQueueSnapshot",
            f'{{"JobQueue": "{job_queue_arn}"}}',
            Output=expression(
                f'{{"FrontOfQueue": {{"Jobs": [{blanked}], '
                '"LastUpdatedAt": $states.result.FrontOfQueue.LastUpdatedAt}}'
            ),
            End=True,
        )

    def _grant(self, queue_name: str | None, job_queue_arn: str | None) -> None:
        stack = cdk.Stack.of(self)
        role = self.state_machine.role
        jobs = [
            stack.format_arn(
                service="sagemaker", resource="training-job", resource_name=f"{self._namespace}-*"
            )
        ]
        if queue_name is not None:
            jobs += batch_training_job_arns(self, queue_name)
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="DescribeJobs", actions=["sagemaker:DescribeTrainingJob"], resources=jobs)
        )
        role.add_to_principal_policy(
            # ListTrainingJobs supports no resource types; the machine keeps only the run's own jobs.
            iam.PolicyStatement(sid="ListJobs", actions=["sagemaker:ListTrainingJobs"], resources=["*"])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadJobLogs",
                actions=["logs:FilterLogEvents"],
                resources=[
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=TRAINING_LOG_GROUP,
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        if job_queue_arn is not None:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="ReadQueue",
                    actions=["batch:ListServiceJobs", "batch:DescribeServiceJob"],
                    resources=["*"],  # no resource types (Service Authorization Reference, AWS Batch)
                )
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="QueuePositions", actions=["batch:GetJobQueueSnapshot"], resources=[job_queue_arn]
                )
            )
        acknowledge_wildcard_statements(
            role,
            {
                "DescribeJobs": f"Job names are known at run time; the reader answers only about the jobs of "
                f"{self._namespace}'s role (its own check)."
            },
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ListTrainingJobs, ListServiceJobs, DescribeServiceJob and the CloudWatch Logs delivery and "
            "X-Ray actions (added by CDK for logging and tracing) support no resource types; the reader "
            "answers only about the team's runs (its own checks).",
        )


def team_run_reader(
    scope: Construct, namespace: str, team: Team, sagemaker_role: iam.IRole, queue: TrainingQueue | None
) -> RunReader:
    """The team's reader, reading the shared queue's service jobs of the team's share in queue mode."""
    return RunReader(
        scope,
        "RunReader",
        namespace=namespace,
        sagemaker_role=sagemaker_role,
        queue_name=queue.queue_name if queue is not None else None,
        job_queue_arn=queue.job_queue_arn if queue is not None else None,
        share=team.share_identifier if queue is not None else None,
    )
