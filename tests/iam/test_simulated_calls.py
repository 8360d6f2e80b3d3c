"""Every call the product makes, simulated offline against the synthesized roles (docs/iam.md, "Simulated
calls"): each state machine's tasks as they evaluate for a representative run, the training job's own reads
and writes with the SageMaker execution role, EventBridge's and Scheduler's roles, the Lambda handlers."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from tests.iam.calls import RUN_NAME_SUFFIX, CallCatalog
from tests.iam.conftest import MODES, PLAN, PLATFORM_BOUNDARY
from tests.iam.simulator import simulate
from trainstack.registry import EVALUATION_JOBS_LIMIT, evaluation_job_name


def denial_report(mode) -> str:
    return "\n".join(decision.explain() for decision in mode.denials)


def test_default_mode_calls_are_all_allowed(simulated_default):
    assert simulated_default.denials == [], denial_report(simulated_default)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_call_is_allowed(simulated_mode, mode):
    simulated = simulated_mode(mode)
    assert simulated.denials == [], denial_report(simulated)


def test_every_task_of_every_state_machine_is_simulated(simulated_mode):
    """Each Task state of every machine (queue machines included) contributes at least one call."""
    simulated = simulated_mode("queue-with-plans")
    machines = simulated.app.state_machines()
    assert {
        "trainstack-pipeline",
        "trainstack-pipeline-attempt",
        "trainstack-job-cleanup",
        "trainstack-queue-cleanup",
        "trainstack-queue-sweeper",
    } <= set(machines)
    callers = {call.caller for call in simulated.calls}
    from tests.iam.calls import _task_states

    missing = [
        f"{name}/{state}"
        for name, (definition, _) in machines.items()
        for state, _ in _task_states(definition["States"])
        if f"{name}/{state}" not in callers
    ]
    assert missing == []


@pytest.mark.parametrize("mode", ["default", "queue-with-plans"])
def test_evaluation_jobs_first_and_longest_names_are_simulated(simulated_default, simulated_mode, mode):
    """Each evaluation job runs in an attempt execution (docs/registry.md): the registration machine starts
    the attempt machine and creates no training job itself; without the queue the attempt machine creates
    and describes the first evaluation job and the last one a run's retries can reach (the longest name),
    in queue mode it submits them (the attempts' SubmitServiceJob authorizations)."""
    simulated = simulated_default if mode == "default" else simulated_mode(mode)
    project = simulated.settings.project
    run_name = f"{project}-{RUN_NAME_SUFFIX}"

    def made_by(machine: str) -> set[tuple[str, str]]:
        return {
            (call.action, call.resource.rsplit("/", 1)[-1])
            for call in simulated.calls
            if call.caller.startswith(f"{project}-{machine}/")
        }

    registration, attempt = made_by("pipeline-registration"), made_by("pipeline-attempt")
    assert "states:StartExecution" in {action for action, _ in registration}
    assert not {action for action, _ in registration} & {
        "sagemaker:CreateTrainingJob",
        "batch:SubmitServiceJob",
    }
    if mode != "default":
        assert "batch:SubmitServiceJob" in {action for action, _ in attempt}
        return
    for number in (1, EVALUATION_JOBS_LIMIT):
        name = evaluation_job_name(run_name, number)
        expected = {("sagemaker:CreateTrainingJob", name), ("sagemaker:DescribeTrainingJob", name)}
        assert expected <= attempt, name


def test_the_modes_exercise_what_they_claim(simulated_default, simulated_mode):
    """Spot, FSx and the created VPC in the default config; the training plan's own authorization; the
    schedule's role; the boundary and the role path; S3 dataset reads through KMS with FSx off."""
    default = {
        (call.action, call.resource.split(":")[2] if ":" in call.resource else "*")
        for call in simulated_default.calls
    }
    assert ("ec2:CreateNetworkInterface", "ec2") in default
    plans = simulated_mode("plans-and-schedules")
    assert any(call.resource == PLAN for call in plans.calls)
    assert any(call.caller.startswith("schedule ") for call in plans.calls)
    governed = simulated_mode("control-tower-imported-vpc-no-fsx-queue")
    training = [call for call in governed.calls if call.caller.startswith("training job")]
    assert all(call.role.boundary and "/trainstack/" in call.role.arn for call in training)
    assert {"s3:ListBucket", "kms:Decrypt", "kms:GenerateDataKey"} <= {call.action for call in training}
    assert any("vpc-0a1b2c3d4e5f60718" in str(call.context) for call in training)


def test_a_removed_grant_is_reported_naming_the_call_the_role_and_what_is_missing(simulated_default):
    """Drop the pass-role statement of the attempt machine's role: CreateTrainingJob's role hand-over is
    denied, and the report says which call, which role and what no statement allows."""
    app = simulated_default.app
    [role] = [
        role for role in app.roles.values() if role.logical_id.startswith("TrainingAttemptStateMachineRole")
    ]
    narrowed = copy.deepcopy(role.policies)
    for policy in narrowed:
        policy["policy"]["Statement"] = [
            statement for statement in policy["policy"]["Statement"] if statement["Action"] != "iam:PassRole"
        ]
    narrowed_role = replace(role, policies=narrowed)
    calls = [
        replace(call, role=narrowed_role) if call.role is role else call for call in simulated_default.calls
    ]
    decisions, _ = simulate(calls)
    denied = [decision.explain() for decision in decisions if not decision.allowed]
    sagemaker_role = CallCatalog(app, simulated_default.settings).resources().role_arn
    assert denied == [
        f"DENIED trainstack-pipeline-attempt/CreateTrainingJob: iam:PassRole on {sagemaker_role} by role "
        f"{role.logical_id}: no statement allows iam:PassRole on {sagemaker_role} with "
        '{"iam:PassedToService": "sagemaker.amazonaws.com"}'
    ]


def test_a_boundary_that_lacks_a_service_denies_its_calls(simulated_mode):
    """A call must be allowed by the role's policies and by its permissions boundary: a boundary without
    Batch denies every Batch call, and the report names the boundary."""
    simulated = simulated_mode("control-tower-imported-vpc-no-fsx-queue")
    boundary = copy.deepcopy(PLATFORM_BOUNDARY)
    boundary["Statement"][0]["Action"].remove("batch:*")
    batch_calls = [
        decision.call
        for decision in simulated.decisions
        if decision.allowed and decision.call.action.startswith("batch:")
    ]
    decisions, _ = simulate(batch_calls, {call.role.boundary: boundary for call in batch_calls})
    assert batch_calls and not any(decision.allowed for decision in decisions)
    assert all(
        "its permissions boundary arn:aws:iam::111111111111:policy/PlatformBoundary does not allow it"
        in decision.explain()
        for decision in decisions
    )


def test_the_trigger_mode_shows_triggered_runs_on_the_dashboard_and_listens_to_the_bucket(simulated_mode):
    """plans-and-schedules has retrain_on_new_data on: its dashboard graphs the trigger's executions, and
    its rule starts the trigger machine for the dataset bucket's Object Created events under the prefix."""
    app = simulated_mode("plans-and-schedules").app
    [(_, _, dashboard)] = app.resources_of_type("AWS::CloudWatch::Dashboard")
    body = json.loads(dashboard["DashboardBody"])
    titles = [widget["properties"].get("title", "") for widget in body["widgets"]]
    assert "Retrain on new data (small-torchrun): trigger executions" in titles
    (trigger_widget,) = [
        w for w in body["widgets"] if "Retrain on new data" in w["properties"].get("title", "")
    ]
    # A listing that fails (or a prefix past the manifest's bound) fails the execution too.
    assert '"label": "failed (listing, import or run)"' in json.dumps(trigger_widget)
    [pattern] = [
        properties["EventPattern"]
        for _, _, properties in app.resources_of_type("AWS::Events::Rule")
        if properties.get("EventPattern", {}).get("source") == ["aws.s3"]
    ]
    assert pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["object"] == {"key": [{"prefix": "datasets/corpus/"}]}


def test_the_attempt_creates_jobs_with_the_run_data_key_and_no_other(simulated_mode):
    """customer-managed-key: the attempt's CreateTrainingJob naming the key (output, and the volume of the
    profile on an instance type without instance store) is allowed, as are the training job's KMS calls;
    the same create naming another key, or none, is denied."""
    simulated = simulated_mode("customer-managed-key")
    key = CallCatalog(simulated.app, simulated.settings).resources().kms_key_arn
    creates = [
        decision
        for decision in simulated.decisions
        if decision.call.caller == "trainstack-pipeline-attempt/CreateTrainingJob"
        and decision.call.action == "sagemaker:CreateTrainingJob"
        and ":training-job/" in decision.call.resource
    ]
    assert creates and all(decision.allowed for decision in creates)
    assert all(decision.call.context["sagemaker:OutputKmsKeyArn"] == key for decision in creates)
    assert any(decision.call.context.get("sagemaker:VolumeKmsKeyArn") == key for decision in creates)
    training = {(c.action, c.resource) for c in simulated.calls if c.caller.startswith("training job")}
    assert {("kms:CreateGrant", key), ("kms:GenerateDataKey", key), ("kms:Decrypt", key)} <= training
    # The s3-express profile's session on its SSE-KMS directory bucket (one per namespace), and only that.
    bucket = CallCatalog(simulated.app, simulated.settings).resources().express_checkpoint_bucket
    sessions = [d for d in simulated.decisions if d.call.action == "s3express:CreateSession"]
    assert [d.call.resource.rsplit("/", 1)[1] for d in sessions] == [bucket]
    assert sessions[0].allowed and bucket == "trainstack-ckpt-111111111111--use1-az4--x-s3"
    other = key.rsplit("/", 1)[0] + "/11111111-2222-4333-8444-555555555555"
    tampered = [
        replace(creates[0].call, context={**creates[0].call.context, "sagemaker:OutputKmsKeyArn": other}),
        replace(creates[0].call, context={**creates[0].call.context, "sagemaker:VolumeKmsKeyArn": other}),
        replace(
            creates[0].call,
            context={k: v for k, v in creates[0].call.context.items() if k != "sagemaker:OutputKmsKeyArn"},
        ),
    ]
    decisions, _ = simulate(tampered)
    assert [decision.allowed for decision in decisions] == [False, False, False]
