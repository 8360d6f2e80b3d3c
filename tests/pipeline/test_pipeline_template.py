"""The synthesized pipeline stack: least-privilege IAM, operations resources, outputs and a snapshot."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stacks.pipeline.pipeline_stack import STATE_MACHINE_ARN_OUTPUT
from tests.conftest import REPO_ROOT, deep_merge, default_config_data, synthesize
from tests.infra.templates import mask_asset_hashes, only, resources
from tests.pipeline.conftest import state_machines
from trainstack.config_loading import parse_settings

PROJECT = "trainstack"
# codeVersion in the registration machine's profile table, however the definition string escapes its quotes.
CODE_VERSION = re.compile(r"(codeVersion\W+)(?:[0-9a-f]{40}(?:-dirty)?|unknown)")
# ... and codeRepository its `origin` remote, which differs from one clone to the next.
CODE_REPOSITORY = re.compile(r'(codeRepository[\\"]*:[\\"]*)[^\\"]*')


def policy_statements(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    """Statements of the policies attached to the role whose logical id starts with role_prefix."""
    statements = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        roles = [role["Ref"] for role in policy["Properties"]["Roles"]]
        if any(role.startswith(role_prefix) for role in roles):
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    assert statements, f"no policy for a role {role_prefix}*"
    return statements


def actions(statement: dict[str, Any]) -> list[str]:
    value = statement["Action"]
    return value if isinstance(value, list) else [value]


def text(value: Any) -> str:
    return json.dumps(value)


def test_attempt_machine_role_touches_only_its_training_jobs_and_passes_only_the_sagemaker_role(pipeline):
    statements = policy_statements(pipeline.template, "TrainingAttemptStateMachineRole")
    sagemaker = [s for s in statements if any(a.startswith("sagemaker:") for a in actions(s))]
    assert sorted(a.lower() for s in sagemaker for a in actions(s)) == [
        "sagemaker:addtags",
        "sagemaker:createtrainingjob",
        "sagemaker:describetrainingjob",
        "sagemaker:stoptrainingjob",
    ]
    for statement in sagemaker:
        assert statement["Resource"] == f"arn:aws:sagemaker:us-east-1:111111111111:training-job/{PROJECT}-*"
    (pass_role,) = [s for s in statements if "iam:PassRole" in actions(s)]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert pass_role["Resource"] == {"Fn::GetAtt": [next(iter(sagemaker_role(pipeline.template))), "Arn"]}
    assert_only_logs_and_tracing_on_every_resource(statements)


def test_pipeline_role_runs_only_its_attempt_and_registration_machines(pipeline):
    statements = policy_statements(pipeline.template, "TrainingStateMachineRole")
    assert not [s for s in statements if any(a.startswith(("sagemaker:", "iam:")) for a in actions(s))]
    starts = [s for s in statements if "states:StartExecution" in actions(s)]
    started = [
        r for s in starts for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    ]
    children = (f"{PROJECT}-pipeline-attempt", f"{PROJECT}-pipeline-registration")
    assert sorted(started, key=str) == sorted(
        ({"Ref": machine_id(pipeline.template, name)} for name in children), key=str
    )
    (publish,) = [s for s in statements if "cloudwatch:PutMetricData" in actions(s)]
    assert publish["Condition"] == {"StringEquals": {"cloudwatch:namespace": f"trainstack/{PROJECT}"}}
    assert_only_logs_and_tracing_on_every_resource([s for s in statements if s is not publish])


def assert_only_logs_and_tracing_on_every_resource(statements: list[dict[str, Any]]) -> None:
    assert not [
        s
        for s in statements
        if s.get("Resource") == "*" and not all(a.startswith(("logs:", "xray:")) for a in actions(s))
    ]


def sagemaker_role(template: dict[str, Any]) -> dict[str, Any]:
    return {
        name: body
        for name, body in resources(template, "AWS::IAM::Role").items()
        if name.startswith("SageMakerExecutionRole")
    }


def test_sagemaker_role_is_scoped_to_its_buckets_prefixes_log_group_and_vpc(pipeline):
    statements = {s.get("Sid"): s for s in policy_statements(pipeline.template, "SageMakerExecutionRole")}
    assert statements["ListDataset"]["Condition"] == {"StringLike": {"s3:prefix": ["datasets/*"]}}
    assert text(statements["ReadDataset"]["Resource"]).endswith('/datasets/*"]]}')
    assert actions(statements["ReadDataset"]) == ["s3:GetObject"]
    for resource in statements["ReadWriteRuns"]["Resource"]:
        assert text(resource).endswith(f'/{PROJECT}-*"]]}}')
    assert statements["TrainingLogStreams"]["Resource"] == (
        f"arn:aws:logs:us-east-1:111111111111:log-group:/aws/sagemaker/TrainingJobs:log-stream:{PROJECT}-*"
    )
    assert statements["TrainingMetrics"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}
    }
    interfaces = statements["ManageInterfacesInTrainingVpc"]
    assert "ec2:Vpc" in interfaces["Condition"]["ArnEquals"]
    assert "ec2:CreateNetworkInterfacePermission" in actions(interfaces)
    wildcard = [s for s in statements.values() if s.get("Resource") == "*"]
    assert {a for s in wildcard for a in actions(s)} <= {
        "ecr:GetAuthorizationToken",
        "cloudwatch:PutMetricData",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
    }
    no_s3_wildcard_buckets = [s for s in statements.values() if any(a.startswith("s3:") for a in actions(s))]
    assert all("*" not in text(s["Resource"]).split("/")[0] for s in no_s3_wildcard_buckets)


def test_state_machines_log_everything_and_trace(pipeline):
    for properties in state_machines(pipeline.template).values():
        assert properties["LoggingConfiguration"]["Level"] == "ALL"
        assert properties["TracingConfiguration"] == {"Enabled": True}
        assert properties["StateMachineType"] == "STANDARD"


def test_cleanup_rule_starts_the_cleanup_machine_for_unsuccessful_executions_of_the_pipeline(pipeline):
    rules = resources(pipeline.template, "AWS::Events::Rule")
    cleanup = next(body for name, body in rules.items() if name.startswith("JobCleanup"))
    pattern = cleanup["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert sorted(pattern["detail"]["status"]) == ["ABORTED", "FAILED", "TIMED_OUT"]
    assert pattern["detail"]["stateMachineArn"] == [{"Ref": training_machine_id(pipeline.template)}]
    assert cleanup["Properties"]["Targets"][0]["Arn"] == {"Ref": cleanup_machine_id(pipeline.template)}


def machine_id(template: dict[str, Any], name: str) -> str:
    return next(
        logical_id
        for logical_id, body in resources(template, "AWS::StepFunctions::StateMachine").items()
        if body["Properties"]["StateMachineName"] == name
    )


def training_machine_id(template: dict[str, Any]) -> str:
    return machine_id(template, f"{PROJECT}-pipeline")


def cleanup_machine_id(template: dict[str, Any]) -> str:
    return machine_id(template, f"{PROJECT}-job-cleanup")


def test_notifications_go_to_an_encrypted_topic_on_every_finished_execution(pipeline):
    template = pipeline.template
    topic = only(template, "AWS::SNS::Topic")
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    assert template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    key_policy = text(template["Resources"][key_id]["Properties"]["KeyPolicy"])
    assert "events.amazonaws.com" in key_policy and "cloudwatch.amazonaws.com" in key_policy
    rules = resources(template, "AWS::Events::Rule")
    notify = next(body for name, body in rules.items() if name.startswith("Notifications"))
    assert sorted(notify["Properties"]["EventPattern"]["detail"]["status"]) == [
        "ABORTED",
        "FAILED",
        "SUCCEEDED",
        "TIMED_OUT",
    ]
    assert notify["Properties"]["Targets"][0]["Arn"] == {
        "Ref": next(iter(resources(template, "AWS::SNS::Topic")))
    }


def test_outputs_name_the_state_machines(pipeline):
    outputs = pipeline.template["Outputs"]
    assert outputs[STATE_MACHINE_ARN_OUTPUT]["Value"] == {"Ref": training_machine_id(pipeline.template)}
    assert outputs["CleanupStateMachineArn"]["Value"] == {"Ref": cleanup_machine_id(pipeline.template)}


def test_jobs_carry_the_metric_definitions(pipeline):
    from training_scripts.metrics import METRIC_DEFINITIONS

    for profile in profile_table(pipeline).values():
        assert profile["request"]["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS


def profile_table(pipeline) -> dict[str, Any]:
    """The profile table the pipeline's first state assigns (a JSONata literal)."""
    text = pipeline.raw_training_definition["States"]["ReadInput"]["Assign"]["profiles"]
    return json.loads(text.removeprefix("{%").removesuffix("%}"))


def test_definitions_are_jsonata_within_forty_states_and_valid_for_aws_tools(pipeline):
    definitions = [pipeline.training_definition, pipeline.attempt_definition]
    parsed = [json.loads(text) for text in definitions]
    assert all(definition["QueryLanguage"] == "JSONata" for definition in parsed)
    assert sum(len(definition["States"]) for definition in parsed) <= 40
    for definition in parsed:
        for state in definition["States"].values():
            assert "QueryLanguage" not in state and "Parameters" not in state and "ResultPath" not in state
    assert aws_validation(definitions) == [{"aslValidator": [], "languageService": []}] * 2
    # The validators do find faults: a state pointing at no state.
    broken = definitions[1].replace('"Next":"WaitForJob"', '"Next":"NoSuchState"', 1)
    assert aws_validation([broken])[0] != {"aslValidator": [], "languageService": []}


def aws_validation(definitions: list[str]) -> list[dict[str, list[str]]]:
    """asl-validator's and amazon-states-language-service's findings (npm, pinned in package.json)."""
    result = subprocess.run(
        ["node", str(Path(__file__).with_name("validate_asl.js"))],
        input=json.dumps(definitions),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    return json.loads(result.stdout)


def test_expressions_have_no_lone_dollar(pipeline):
    """AWS and the local interpreter reject a lone `$` or `$$` inside a JSONata expression."""
    from moto.stepfunctions.parser.asl.jsonata.jsonata import extract_jsonata_variable_references

    for text in (pipeline.training_definition, pipeline.attempt_definition):
        for expression in re.findall(r"\{%(.*?)%\}", text):
            extract_jsonata_variable_references(json.loads(f'"{expression}"'))


@pytest.fixture(scope="module")
def scheduled_app(tmp_path_factory):
    data = default_config_data()
    data["profiles"][1] = deep_merge(data["profiles"][1], {"schedule": "cron(0 3 ? * SUN *)"})
    data["notification_emails"] = ["ml-team@example.com"]
    settings = parse_settings(data, {}, source="test config")
    stacks, assembly = synthesize(settings, tmp_path_factory.mktemp("cdk.out"))
    return settings, assembly.get_stack_by_name(stacks.pipeline.stack_name).template


def test_profile_schedule_starts_the_pipeline_with_that_profile(scheduled_app):
    settings, template = scheduled_app
    schedule = only(template, "AWS::Scheduler::Schedule")["Properties"]
    assert schedule["ScheduleExpression"] == "cron(0 3 ? * SUN *)"
    assert json.loads(schedule["Target"]["Input"]) == {"profile": settings.profiles[1].name}
    assert schedule["Target"]["Arn"] == {"Ref": training_machine_id(template)}
    subscription = only(template, "AWS::SNS::Subscription")["Properties"]
    assert (subscription["Protocol"], subscription["Endpoint"]) == ("email", "ml-team@example.com")


def test_template_snapshot(pipeline, snapshot):
    # The registry's code.version is the git revision of this checkout (trainstack.registry.code_version).
    masked = CODE_VERSION.sub(r"\1<code-version>", json.dumps(mask_asset_hashes(pipeline.template)))
    masked = CODE_REPOSITORY.sub(r"\1<code-repository>", masked)
    assert json.loads(masked) == snapshot
