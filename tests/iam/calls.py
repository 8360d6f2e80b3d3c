"""Every AWS call the deployed app makes, as IAM authorizes it: who calls, which action on which concrete ARN,
with which request context. docs/iam.md ("Simulated calls") lists the sources.

A call that names several resources (SubmitServiceJob: a job queue and a service job; CreateTrainingJob with a
training plan: the job and the plan) is one authorization per resource: IAM authorizes each (Service
Authorization Reference, "Resource types" column)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.iam.deployed import DeployedApp, Role
from tests.iam.registry_calls import RegistryCalls
from tests.iam.training_job_calls import ECR_PULL_ACTIONS, TrainingJobCalls
from tests.iam.trigger_calls import TriggerCalls
from trainstack.job_request import NAMESPACE_TAG
from trainstack.queue_settings import BATCH_TRAINING_JOB_PREFIX, service_job_name, training_queue_name
from trainstack.registry import EVALUATION_JOBS_LIMIT, evaluation_job_name, is_evaluation_job

# The representative run: its name, the execution that runs it, Batch's ids for its service job.
RUN_NAME_SUFFIX = "nightly-20261201"
EXECUTION_NAME = "0f6d1c8e-run"
ATTEMPT_EXECUTION = "attempt-1-5a4e1b0c-0000-4000-8000-000000000001"
SERVICE_JOB_ID = "5c7b2a90-1d2e-4f3a-9b8c-0123456789ab"
BATCH_ATTEMPT_ID = "0123456789abcdef0123456789abcdef"
# Step Functions' managed rule for .sync integrations (Step Functions developer guide, "IAM policies for
# calling nested Step Functions workflows" / "...for integrated services").
SYNC_RULE = "StepFunctionsGetEventsForStepFunctionsExecutionRule"
# What a state machine with CloudWatch Logs logging and X-Ray tracing calls on "*" (Step Functions developer
# guide, "IAM policies for logging to CloudWatch Logs" and "...for using AWS X-Ray").
LOG_DELIVERY_ACTIONS = (
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
)
TRACING_ACTIONS = (
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
)
ECR_PUSH_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:PutImage",
)


@dataclass(frozen=True)
class Call:
    """One authorization: `role` calls `action` on `resource` (a concrete ARN, or "*")."""

    caller: str  # what makes the call: "<state machine>/<state>", "training job", "<rule> target", ...
    role: Role
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)
    resource_policy: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.caller}: {self.action} on {self.resource} by role {self.role.logical_id}"


class CallCatalog(TrainingJobCalls, TriggerCalls, RegistryCalls):
    def __init__(self, app: DeployedApp, settings):
        self.app, self.settings = app, settings
        self.project = settings.project
        self.run_name = f"{self.project}-{RUN_NAME_SUFFIX}"
        self.queued = settings.queue.enabled
        self.machines = app.state_machines()
        self.pipeline_name = f"{self.project}-pipeline"
        self.job = self.job_name()  # the training job `$job` names in the machine being read
        self.attempt = 1  # `$attempt` in the machine being read

    def arn(self, service: str, resource: str, region: bool = True) -> str:
        if not region:
            return f"arn:aws:{service}:::{resource}"
        return f"arn:aws:{service}:{self.app.region}:{self.app.account}:{resource}"

    # --- the run's names --------------------------------------------------------------------------------

    def job_name(self, attempt: int = 1) -> str:
        """The training job SageMaker runs: ours, or the one Batch creates for the service job."""
        if not self.queued:
            return f"{self.run_name}-{attempt}"
        service_job = service_job_name(training_queue_name(self.project), self.run_name, attempt)
        return f"{BATCH_TRAINING_JOB_PREFIX}{service_job}{BATCH_ATTEMPT_ID}"

    def job_arn(self, attempt: int = 1) -> str:
        return self._training_job(self.job_name(attempt))

    def job_tags(self, job_arn: str) -> dict[str, str]:
        """The tags IAM sees on a training job: none on one Batch created, since no source shows that the
        service job's tags reach it (docs/queue.md)."""
        if job_arn.split("/")[-1].lower().startswith(BATCH_TRAINING_JOB_PREFIX.lower()):
            return {}
        execution = self.arn("states", f"execution:{self.pipeline_name}:{EXECUTION_NAME}")
        return {
            "aws:ResourceTag/trainstack:run": self.run_name,
            "aws:ResourceTag/trainstack:execution": execution,
            "aws:ResourceTag/trainstack:namespace": self.project,
        }

    # --- all of them ------------------------------------------------------------------------------------

    def calls(self) -> list[Call]:
        """Each distinct authorization once (profiles share most of them)."""
        unique: dict[str, Call] = {}
        for call in (
            *self.state_machine_calls(),
            *self.training_job_calls(),
            *self.rule_and_schedule_calls(),
            *self.handler_calls(),
        ):
            key = json.dumps(
                [call.caller.split(" (")[0], call.role.arn, call.action, call.resource, call.context],
                sort_keys=True,
            )
            unique.setdefault(key, call)
        return list(unique.values())

    # --- state machines ---------------------------------------------------------------------------------

    def state_machine_calls(self) -> Iterator[Call]:
        for name, (definition, role) in self.machines.items():
            for action in (*LOG_DELIVERY_ACTIONS, *TRACING_ACTIONS):
                yield Call(f"{name} (logging, tracing)", role, action, "*")
            self.attempt = 1
            for job in self.machine_jobs(name, definition):
                self.job = job
                for state_name, state in _task_states(definition["States"]):
                    caller = f"{name}/{state_name}"
                    for action, resource, context in self.task_authorizations(state):
                        yield Call(caller, role, action, resource, context)

    def task_authorizations(self, state: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        """(action, resource, context) IAM checks for one Task state, for the representative run."""
        integration = state["Resource"].removeprefix("arn:aws:states:::")
        arguments = state.get("Arguments", {})
        if integration.startswith("states:startExecution.sync"):
            # A version or alias ARN (`...:stateMachine:<name>:<qualifier>`) is authorized as the state
            # machine's own ARN (Step Functions developer guide, "Authorization for versions and
            # aliases"), and its executions are the machine's (`execution:<name>:<id>`).
            target = ":".join(arguments["StateMachineArn"].split(":")[:7])
            execution = target.replace(":stateMachine:", ":execution:") + f":{ATTEMPT_EXECUTION}"
            rule = self.arn("events", f"rule/{SYNC_RULE}")
            return [
                ("states:StartExecution", target, {}),
                ("states:DescribeExecution", execution, {}),
                ("states:StopExecution", execution, {}),
                *(
                    (action, rule, {})
                    for action in ("events:PutTargets", "events:PutRule", "events:DescribeRule")
                ),
            ]
        service, action = integration.removeprefix("aws-sdk:").split(":")
        iam_action = f"{_IAM_SERVICE.get(service, service)}:{action[0].upper()}{action[1:]}"
        builder = getattr(self, f"_{service}_{action}", None)
        if builder is None:
            raise AssertionError(f"no representative call for {integration}: add one to CallCatalog")
        return [
            (iam_action if action is None else action, casing, context)
            for action, resource, context in builder(arguments)
            for casing in arn_casings(resource)
        ]

    def _pipeline_execution(self) -> str:
        return self.arn("states", f"execution:{self.pipeline_name}:{EXECUTION_NAME}")

    def machine_jobs(self, name: str, definition: dict[str, Any]) -> list[str]:
        """The training jobs a machine runs: the one it describes; the attempt machine also runs each
        registered profile's evaluation jobs (registry/evaluation_states.py): the first and the last a run's
        retries can reach, the longest name."""
        jobs = [self.described_job(definition)]
        if name == f"{self.pipeline_name}-attempt" and self.registered_profiles():
            jobs += [evaluation_job_name(self.run_name, number) for number in (1, EVALUATION_JOBS_LIMIT)]
        return jobs

    def described_job(self, definition: dict[str, Any]) -> str:
        """The training job a machine's `$job` holds: the one it describes, else (a sweeper finding jobs by
        tag) the run's."""
        self.job = self.job_name()
        for _, state in _task_states(definition["States"]):
            if state["Resource"].endswith("sagemaker:describeTrainingJob"):
                return self.argument(state["Arguments"], "TrainingJobName")
        return self.job

    def bindings(self) -> dict[str, Any]:
        """JSONata variables of the representative run, as the tasks' argument expressions use them."""
        job = {"name": self.job, "arn": self._training_job(self.job)}
        execution = self._pipeline_execution()
        return {
            "runName": self.run_name,
            "run": {"runName": self.run_name},  # the registration machine's input (docs/registry.md)
            "attempt": self.attempt,
            "job": job,
            # The queued attempt's earlier training jobs (batch_training_jobs.py): one, named like the latest.
            "service": {"id": SERVICE_JOB_ID, "trainingJobArn": self.job_arn(), "earlier": [self.job_arn()]},
            "ended": [],
            "jobId": SERVICE_JOB_ID,
            "owner": execution,
            "nextToken": "token",
            "states": {
                "input": {"detail": {"executionArn": execution}, "execution": execution},
                "context": self.trigger_bindings()["context"],
            },
            "importTask": self.trigger_bindings()["importTask"],
            # The dataset manifest's child machine: the bucket its callers list (manifest_listing.py).
            "listing": {"bucket": self.resources().dataset_bucket},
        }

    def argument(self, arguments: dict[str, Any], name: str) -> str:
        """One argument of a task as it evaluates for the representative run ({% ... %} is JSONata)."""
        from localaws.emulator import VirtualClock
        from localaws.emulator.jsonata_engine import jsonata_evaluator

        value = arguments[name]
        if isinstance(value, str) and value.startswith("{%"):
            return jsonata_evaluator(VirtualClock())(
                value.removeprefix("{%").removesuffix("%}"), self.bindings()
            )
        return value

    def _training_job(self, name: str) -> str:
        return self.arn("sagemaker", f"training-job/{name}")

    def _sfn_describeExecution(self, arguments):  # noqa: N802 (named after the integration)
        return [(None, self.argument(arguments, "ExecutionArn"), {})]

    def _cloudwatch_putMetricData(self, arguments):  # noqa: N802
        return [(None, "*", {"cloudwatch:namespace": arguments["Namespace"]})]

    def _sagemaker_search(self, arguments):
        return [(None, "*", {})]

    def _sagemaker_describeTrainingJob(self, arguments):  # noqa: N802
        job = self._training_job(self.argument(arguments, "TrainingJobName"))
        return [(None, job, self.job_tags(job))]

    _sagemaker_stopTrainingJob = _sagemaker_describeTrainingJob

    def _sagemaker_listTags(self, arguments):  # noqa: N802
        job = self.argument(arguments, "ResourceArn")
        return [(None, job, self.job_tags(job))]

    def _sagemaker_createTrainingJob(self, arguments):  # noqa: N802
        if is_evaluation_job(self.job):
            return self.evaluation_create_authorizations()
        return self.create_authorizations()

    def create_authorizations(self, profile=None) -> list[tuple[str, str, dict[str, Any]]]:
        """CreateTrainingJob of the run's first attempt, for each profile (or one): the job with its request
        context, its tags, every training plan it names, and the role it passes."""
        found = []
        for candidate in [profile] if profile else self.settings.profiles:
            request = self.request(candidate)
            job = self._training_job(request["TrainingJobName"])
            tags = {tag["Key"]: tag["Value"] for tag in request["Tags"]}
            context = {
                **create_request_context(request),
                **{f"aws:RequestTag/{key}": value for key, value in tags.items()},
                "aws:TagKeys": list(tags),
            }
            found += [
                ("sagemaker:CreateTrainingJob", job, context),
                ("sagemaker:AddTags", job, {key: value for key, value in context.items() if "Tag" in key}),
                *(("sagemaker:CreateTrainingJob", plan, {}) for plan in _training_plans(request)),
                ("iam:PassRole", request["RoleArn"], {"iam:PassedToService": "sagemaker.amazonaws.com"}),
            ]
        return found

    def _batch_submitServiceJob(self, arguments):  # noqa: N802
        queue = self.queue_arn()
        service_job = self.arn("batch", f"service-job/{SERVICE_JOB_ID}")
        found = []
        for profile in self.settings.profiles:
            tags = {tag["Key"]: tag["Value"] for tag in self.request(profile)["Tags"]}
            tag_context = {**{f"aws:RequestTag/{k}": v for k, v in tags.items()}, "aws:TagKeys": list(tags)}
            role = self.request(profile)["RoleArn"]
            scheduling = self.scheduling_context(profile)
            found += [
                ("batch:SubmitServiceJob", queue, scheduling),
                ("batch:SubmitServiceJob", service_job, {**tag_context, **scheduling}),
                ("batch:TagResource", service_job, tag_context),
                # Batch hands the payload's RoleArn to SageMaker (assumed: the Batch guide names no service).
                ("iam:PassRole", role, {"iam:PassedToService": "sagemaker.amazonaws.com"}),
            ]
        return found

    def scheduling_context(self, profile) -> dict[str, Any]:
        """What the queued attempt sends Batch for a run that names no share or priority: the queue's first
        share and the profile's priority (queued_training_attempt.queue_attempt_fields), as condition keys."""
        shares = list(self.settings.queue.shares)
        context: dict[str, Any] = {"batch:ShareIdentifier": shares[0]} if shares else {}
        if profile.priority is not None:
            context["batch:SchedulingPriority"] = str(profile.priority)
        return context

    def queue_arn(self) -> str:
        [(_, _, properties)] = self.app.resources_of_type("AWS::Batch::JobQueue")
        return self.arn("batch", f"job-queue/{properties['JobQueueName']}")

    def _dynamodb_putItem(self, arguments):  # noqa: N802 (the queued attempt's run-name claim)
        # The item's partition key is the run name (queue/run_names.py).
        keys = {"dynamodb:LeadingKeys": [self.run_name]}
        return [(None, self.arn("dynamodb", f"table/{arguments['TableName']}"), keys)]

    def _batch_describeServiceJob(self, arguments):  # noqa: N802
        return [(None, "*", {})]  # the action supports no resource type (Service Authorization Reference)

    def _batch_listServiceJobs(self, arguments):  # noqa: N802
        return [(None, "*", {})]

    def _batch_terminateServiceJob(self, arguments):  # noqa: N802
        # The pipeline's service jobs carry its namespace tag (job_request.tags, submitted as the job's tags).
        tagged = {f"aws:ResourceTag/{NAMESPACE_TAG}": self.project}
        return [(None, self.arn("batch", f"service-job/{self.argument(arguments, 'JobId')}"), tagged)]

    def training_job_calls(self) -> Iterator[Call]:
        resources = self.resources()
        role = self.app.role_by_arn(resources.role_arn)
        previous_run = f"s3://{resources.checkpoint_bucket}/{self.project}-nightly-20261130/"
        for profile in self.settings.profiles:
            request = self.request(profile, resume_from=previous_run)
            caller = f"training job ({profile.name})"
            for action, resource, context in self.job_authorizations(request):
                yield Call(caller, role, action, resource, context, self.resource_policy(resource))
        for profile, action, resource, context in self.evaluation_job_calls():
            caller = f"evaluation job ({profile})"
            yield Call(caller, role, action, resource, context, self.resource_policy(resource))

    # --- EventBridge rules and Scheduler schedules --------------------------------------------------------

    def rule_and_schedule_calls(self) -> Iterator[Call]:
        for kind, label in (("AWS::Events::Rule", "rule"), ("AWS::Scheduler::Schedule", "schedule")):
            for _, logical_id, properties in self.app.resources_of_type(kind):
                targets = properties.get("Targets") or [properties["Target"]]
                for target in targets:
                    if "RoleArn" not in target:
                        continue
                    role = self.app.role_by_arn(target["RoleArn"])
                    assert ":stateMachine:" in target["Arn"], (
                        f"{logical_id}: unexpected target {target['Arn']}"
                    )
                    yield Call(f"{label} {logical_id}", role, "states:StartExecution", target["Arn"])

    # --- Lambda handlers and other service roles ----------------------------------------------------------

    def handler_calls(self) -> Iterator[Call]:
        for stack, logical_id, properties in self.app.resources_of_type("AWS::Lambda::Function"):
            role = self.app.role_by_arn(properties["Role"])
            caller = f"function {logical_id}"
            log_group = self.arn(
                "logs", f"log-group:/aws/lambda/{self.app.resolve({'Ref': logical_id}, stack)}"
            )
            for action, resource in (
                ("logs:CreateLogGroup", log_group),
                ("logs:CreateLogStream", f"{log_group}:log-stream:2026/12/01/[$LATEST]0123"),
                ("logs:PutLogEvents", f"{log_group}:log-stream:2026/12/01/[$LATEST]0123"),
            ):
                yield Call(caller, role, action, resource)
            for action, resource in self._handler_work(stack, logical_id):
                yield Call(caller, role, action, resource)
        for _, logical_id, properties in self.app.resources_of_type("AWS::EC2::FlowLog"):
            role = self.app.role_by_arn(properties["DeliverLogsPermissionArn"])
            group = self.arn("logs", f"log-group:{properties['LogGroupName']}")
            for action in ("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"):
                yield Call(
                    f"flow log {logical_id}", role, action, f"{group}:log-stream:eni-0123456789abcdef0-all"
                )

    def _handler_work(self, stack: str, function_id: str) -> Iterator[tuple[str, str]]:
        """What each custom-resource handler calls: the resources that invoke it say on what."""
        for _, _, properties in self.app.resources_of_type("Custom::CDKECRDeployment"):
            if properties["ServiceToken"].endswith(f":{self.app.resolve({'Ref': function_id}, stack)}"):
                # cdk-ecr-deployment copies with the registry API: pull from SrcImage, push to DestImage.
                yield ("ecr:GetAuthorizationToken", "*")
                for image, actions in (
                    (properties["SrcImage"], ECR_PULL_ACTIONS),
                    (properties["DestImage"], ECR_PUSH_ACTIONS),
                ):
                    repository = image.removeprefix("docker://").partition("/")[2].rsplit(":", 1)[0]
                    for action in actions:
                        yield (action, self.arn("ecr", f"repository/{repository}"))
        for _, _, properties in self.app.resources_of_type("Custom::VpcRestrictDefaultSG"):
            if properties["ServiceToken"].endswith(f":{self.app.resolve({'Ref': function_id}, stack)}"):
                # aws-cdk-lib's restrict-default-security-group handler revokes the default rules.
                group = self.arn("ec2", f"security-group/{properties['DefaultSecurityGroupId']}")
                for action in ("ec2:RevokeSecurityGroupIngress", "ec2:RevokeSecurityGroupEgress"):
                    yield (action, group)


_IAM_SERVICE = {"sfn": "states"}


def arn_casings(resource: str) -> list[str]:
    """A training job's ARN as named and, if that differs, lower-cased: SageMaker reports ARNs in lower case
    (boto/boto3#4606) and no source says which casing IAM authorizes, so a grant must match both (assumed)."""
    if ":training-job/" not in resource or resource == resource.lower():
        return [resource]
    return [resource, resource.lower()]


def _task_states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from _task_states(branch["States"])
        for key in ("ItemProcessor", "Iterator"):
            if key in state:
                yield from _task_states(state[key]["States"])


def create_request_context(request: dict[str, Any]) -> dict[str, Any]:
    """CreateTrainingJob's request condition keys (Service Authorization Reference, SageMaker) as the
    request sets them: its network, instance types, runtime, (FSx channels) file system, and KMS keys (the
    request's OutputDataConfig.KmsKeyId and ResourceConfig.VolumeKmsKeyId, where present)."""
    context: dict[str, Any] = {
        "sagemaker:VpcSubnets": request["VpcConfig"]["Subnets"],
        "sagemaker:VpcSecurityGroupIds": request["VpcConfig"]["SecurityGroupIds"],
        "sagemaker:InstanceTypes": _instance_types(request),
        "sagemaker:MaxRuntimeInSeconds": str(request["StoppingCondition"]["MaxRuntimeInSeconds"]),
    }
    file_systems = [
        channel["DataSource"]["FileSystemDataSource"]
        for channel in request.get("InputDataConfig", [])
        if "FileSystemDataSource" in channel["DataSource"]
    ]
    # One value each (the keys are single-valued): the request's one file system channel.
    for source in file_systems[:1]:
        context["sagemaker:FileSystemId"] = source["FileSystemId"]
        context["sagemaker:FileSystemDirectoryPath"] = source["DirectoryPath"]
    keys = {
        "sagemaker:OutputKmsKeyArn": request["OutputDataConfig"].get("KmsKeyId"),
        "sagemaker:VolumeKmsKeyArn": request["ResourceConfig"].get("VolumeKmsKeyId"),
    }
    context.update({name: value for name, value in keys.items() if value is not None})
    return context


def _instance_types(request: dict[str, Any]) -> list[str]:
    config = request["ResourceConfig"]
    if "InstancePreferences" in config:
        return [preference["InstanceType"] for preference in config["InstancePreferences"]]
    return [config["InstanceType"]]


def _training_plans(request: dict[str, Any]) -> list[str]:
    config = request["ResourceConfig"]
    return [
        plan
        for preference in config.get("InstancePreferences", [])
        for plan in preference.get("TrainingPlanArns", [])
    ] + ([request["ResourceConfig"]["TrainingPlanArn"]] if "TrainingPlanArn" in config else [])
