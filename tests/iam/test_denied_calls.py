"""What the job-creating grants refuse (docs/iam.md, "What the grants refuse"): the attempt and registration
machines' CreateTrainingJob outside the project's network, instance types, runtime or file system, a role
other than the pipeline's SageMaker role, and in queue mode SubmitServiceJob with a share the queue does
not have or a priority above the bound. Each denial is the product's own allowed call with one request
value changed, simulated in one batch beside the unchanged call, which stays allowed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.iam.calls import Call
from tests.iam.conftest import PLATFORM_BOUNDARY
from tests.iam.simulator import simulate
from trainstack.profiles import MAX_PRIORITY

ANOTHER_ROLE = "arn:aws:iam::111111111111:role/platform-admin"


def _call(simulated, caller: str, action: str, resource_type: str) -> Call:
    """The first allowed call of `caller` (a state machine/state) with `action` on a `resource_type` ARN."""
    return next(
        decision.call
        for decision in simulated.decisions
        if decision.allowed
        and decision.call.caller == caller
        and decision.call.action == action
        and f":{resource_type}" in decision.call.resource
    )


def _without(context: dict, *keys: str) -> dict:
    return {key: value for key, value in context.items() if key not in keys}


def create_variants(create: Call, pass_role: Call) -> dict[str, Call]:
    """A CreateTrainingJob (and its PassRole) with one thing the grants must refuse."""
    context = create.context
    variants = {
        "another subnet": {**context, "sagemaker:VpcSubnets": ["subnet-0fffffffffffffff0"]},
        "one more subnet": {
            **context,
            "sagemaker:VpcSubnets": [*context["sagemaker:VpcSubnets"], "subnet-0fffffffffffffff0"],
        },
        "another security group": {**context, "sagemaker:VpcSecurityGroupIds": ["sg-0fffffffffffffff0"]},
        "no VpcConfig": _without(context, "sagemaker:VpcSubnets", "sagemaker:VpcSecurityGroupIds"),
        "an instance type no profile names": {**context, "sagemaker:InstanceTypes": ["ml.p3.2xlarge"]},
        "a runtime above the longest allowed": {**context, "sagemaker:MaxRuntimeInSeconds": "2419201"},
    }
    if "sagemaker:FileSystemDirectoryPath" in context:
        path = context["sagemaker:FileSystemDirectoryPath"]
        variants["another file system directory"] = {
            **context,
            "sagemaker:FileSystemDirectoryPath": path.rsplit("/", 1)[0] + "/other",
        }
        variants["another file system"] = {**context, "sagemaker:FileSystemId": "fs-0fffffffffffffff0"}
    calls = {name: replace(create, context=value) for name, value in variants.items()}
    calls["passing another role"] = replace(pass_role, resource=ANOTHER_ROLE)
    return calls


def _assert_denied(original: list[Call], denied: dict[str, Call]) -> None:
    calls = [*original, *denied.values()]
    decisions, _ = simulate(
        calls, {call.role.boundary: PLATFORM_BOUNDARY for call in calls if call.role.boundary}
    )
    kept, refused = decisions[: len(original)], decisions[len(original) :]
    assert [decision.explain() for decision in kept if not decision.allowed] == []
    assert [name for name, decision in zip(denied, refused, strict=True) if decision.allowed] == []


def test_creating_a_job_outside_the_projects_network_types_runtime_or_role_is_denied(simulated_default):
    caller = f"{simulated_default.settings.project}-pipeline-attempt/CreateTrainingJob"
    create = _call(simulated_default, caller, "sagemaker:CreateTrainingJob", "training-job/")
    pass_role = _call(simulated_default, caller, "iam:PassRole", "role/")
    _assert_denied([create, pass_role], create_variants(create, pass_role))


def test_the_registration_machine_creates_no_training_job_itself(simulated_default):
    """Its evaluation jobs are the attempt machine's (docs/registry.md): the registration role may start
    that machine, and may neither create a training job nor pass the jobs' role."""
    project = simulated_default.settings.project
    attempt = f"{project}-pipeline-attempt/CreateTrainingJob"
    create = _call(simulated_default, attempt, "sagemaker:CreateTrainingJob", "training-job/")
    pass_role = _call(simulated_default, attempt, "iam:PassRole", "role/")
    start = _call(
        simulated_default,
        f"{project}-pipeline-registration/RunEvaluationJob",
        "states:StartExecution",
        "stateMachine:",
    )
    denied = {
        "create an evaluation job itself": replace(create, role=start.role),
        "pass the jobs' role": replace(pass_role, role=start.role),
    }
    _assert_denied([start], denied)


@pytest.mark.parametrize("mode", ["queue-with-plans", "control-tower-imported-vpc-no-fsx-queue"])
def test_submitting_with_another_share_or_a_priority_above_the_bound_is_denied(simulated_mode, mode):
    simulated = simulated_mode(mode)
    caller = f"{simulated.settings.project}-pipeline-attempt/SubmitServiceJob"
    service_job = _call(simulated, caller, "batch:SubmitServiceJob", "service-job/")
    queue = _call(simulated, caller, "batch:SubmitServiceJob", "job-queue/")
    pass_role = _call(simulated, caller, "iam:PassRole", "role/")
    context = service_job.context
    too_high = {"batch:SchedulingPriority": str(MAX_PRIORITY + 1)}
    denied = {
        "another share": replace(service_job, context={**context, "batch:ShareIdentifier": "teamC"}),
        "no share": replace(service_job, context=_without(context, "batch:ShareIdentifier")),
        "a priority above the bound": replace(service_job, context={**context, **too_high}),
        "a priority above the bound (queue)": replace(queue, context={**queue.context, **too_high}),
        "passing another role": replace(pass_role, resource=ANOTHER_ROLE),
    }
    _assert_denied([service_job, queue, pass_role], denied)


def test_a_queue_without_shares_denies_any_share_or_priority(tmp_path_factory):
    """A FIFO queue: the pipeline sends neither share nor priority, and the grant allows neither."""
    from tests.conftest import NO_ENV, deep_merge, default_config_data, synthesize
    from tests.iam.conftest import simulate_app
    from trainstack.config_loading import parse_settings

    data = deep_merge(default_config_data(), {"queue": {"enabled": True}})
    settings = parse_settings(data, NO_ENV, source="fifo queue")
    outdir = tmp_path_factory.mktemp("fifo.cdk.out")
    synthesize(settings, outdir)
    simulated = simulate_app(settings, outdir)
    assert simulated.denials == []
    caller = f"{settings.project}-pipeline-attempt/SubmitServiceJob"
    service_job = _call(simulated, caller, "batch:SubmitServiceJob", "service-job/")
    queue = _call(simulated, caller, "batch:SubmitServiceJob", "job-queue/")
    denied = {
        "a share": replace(service_job, context={**service_job.context, "batch:ShareIdentifier": "teamA"}),
        "a priority": replace(service_job, context={**service_job.context, "batch:SchedulingPriority": "1"}),
        "a priority (queue)": replace(queue, context={"batch:SchedulingPriority": "1"}),
    }
    _assert_denied([service_job, queue], denied)
