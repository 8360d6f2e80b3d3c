"""Retrain on new data, on the stepped clock: uploads land at the minutes the scenario says, EventBridge
starts the trigger machine per object, and the trigger starts the real pipeline (scripted SageMaker jobs;
its registration machine evaluates and registers each run's model, docs/registry.md)."""

from __future__ import annotations

import json
import time

import pytest

from localaws.demo.trigger_world import trigger_world
from localaws.emulator.fake_fsx import FakeFsx, ImportScript
from localaws.sagemaker import evaluated, scripted_sagemaker
from localaws.sagemaker.scripted import COMPLETED, STARTING, TRAINING, failed
from tests.infra.templates import resources
from tests.pipeline.conftest import FAKE_VALUES
from tests.pipeline.trigger_machines import (
    PREFIX,
    PROFILE,
    PROJECT,
    TRIGGER,
    trigger_machines,
    trigger_templates,
)
from trainstack.commands.triggers import describe_trigger
from trainstack.registry import lease_table_name
from trainstack.trigger_settings import trigger_table_name

MINUTE = 60
# A job that trains for five polls, so that uploads can land during the run.
LONG_JOB = [STARTING, *[TRAINING] * 5, COMPLETED]


@pytest.fixture(scope="module")
def templates(pipeline):
    return trigger_templates(pipeline.settings)


@pytest.fixture
def world(templates, pipeline, monkeypatch):
    def start(variant: str = "fsx", fsx_scripts=(), job_scripts=None):
        # Linked as the storage stack links it: the dataset prefix by a data repository association.
        link = f"s3://{FAKE_VALUES['DatasetBucket']}/{pipeline.settings.dataset.prefix}"
        links = {FAKE_VALUES["FileSystemId"]: (link,)}
        fsx = FakeFsx(links, scripts=list(fsx_scripts)) if variant == "fsx" else None
        sagemaker = scripted_sagemaker(job_scripts, evaluation_script=evaluated(2.0))  # PROFILE registers
        context = trigger_world(trigger_machines(templates[variant], pipeline), sagemaker, fsx, monkeypatch)
        contexts.append(context)
        return context.__enter__()

    contexts = []
    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


def upload_burst(world, count: int, every_minutes: float, name: str = "shard") -> None:
    for index in range(count):
        world.upload(f"{PREFIX}{name}-{index:03d}.bin", f"{name}{index}".encode())
        world.advance(every_minutes * MINUTE)


def outputs(executions) -> list[dict]:
    return [json.loads(item["output"]) for item in executions if item.get("output")]


def decisions(world) -> list[str]:
    return [output["decision"] for output in outputs(world.triggers())]


def upload_time(world, index: int) -> float:
    return world.triggers()[index]["startDate"].timestamp()


def test_a_burst_of_uploads_starts_one_run_once_the_prefix_is_quiet(world):
    world = world()
    upload_burst(world, 6, every_minutes=1)
    world.run_until_idle()

    (run,) = world.runs()
    assert run["status"] == "SUCCEEDED"
    assert json.loads(run["input"]) == {"profile": PROFILE, "runName": run["name"]}
    assert json.loads(run["output"])["modelPackage"]["decision"] == "Approved"  # the first version
    assert run["startDate"].timestamp() - upload_time(world, 5) >= 15 * MINUTE, "quiet_minutes after the last"
    assert decisions(world).count("trained") == 1
    (task,) = world.fsx.tasks
    assert task["Type"] == "IMPORT_METADATA_FROM_REPOSITORY"
    assert task["Paths"] == [f"s3://{FAKE_VALUES['DatasetBucket']}/{PREFIX}"]
    assert task["EndTime"] <= run["startDate"].timestamp() + 0.001, "FSx caught up before the run started"
    assert "controller" not in world.item()[PROFILE], "the controller let go"


def slow_item_reads(monkeypatch, seconds: float, when) -> None:
    """Reads of the trigger's item take `seconds` of real time, reading no clock, while `when()` holds
    (a loaded machine): longer than the uploads and jumps the scenario makes meanwhile."""
    from moto.dynamodb.responses import DynamoHandler

    get_item = DynamoHandler.get_item

    def slow(self):
        if self.body.get("TableName") == trigger_table_name(PROJECT) and when():
            time.sleep(seconds)
        return get_item(self)

    monkeypatch.setattr(DynamoHandler, "get_item", slow)


# The import task (120 s: two polls 60 s apart) comes between the window's close and the run.
IMPORT_MINUTES = 2


@pytest.mark.parametrize("read_seconds", [0, 1.5], ids=["fast", "slow-service"])
def test_a_burst_longer_than_max_delay_runs_at_the_deadline_and_once_more_after(
    world, monkeypatch, read_seconds
):
    """However long a state takes in real time, the clock does not move on while it works."""
    world = world()
    deadline = world.clock.time() + 60 * MINUTE  # the first upload lands now
    slow_item_reads(monkeypatch, read_seconds, when=lambda: world.clock.time() == deadline)
    upload_burst(world, 8, every_minutes=10)  # 80 minutes of uploads, max_delay_hours is 1
    world.run_until_idle()

    first, second = world.runs()
    assert first["startDate"].timestamp() - upload_time(world, 0) == 60 * MINUTE + IMPORT_MINUTES * MINUTE
    assert first["startDate"].timestamp() < upload_time(world, 7), "it did not wait for the burst to end"
    assert second["startDate"].timestamp() >= first["stopDate"].timestamp()
    assert [run["status"] for run in (first, second)] == ["SUCCEEDED", "SUCCEEDED"]


def test_the_deadline_closes_the_window_with_no_event_after_it(world):
    world = world()
    upload_burst(world, 6, every_minutes=10)  # the last at minute 50: quiet would close it at 65
    world.run_until_idle()

    (run,) = world.runs()
    assert run["startDate"].timestamp() - upload_time(world, 0) == 60 * MINUTE + IMPORT_MINUTES * MINUTE


def test_the_same_files_again_start_no_training_and_say_so(world):
    world = world("no-fsx")
    upload_burst(world, 3, every_minutes=1)
    world.run_until_idle()
    upload_burst(world, 3, every_minutes=1)  # the same keys and contents: the same ETags
    world.run_until_idle()

    assert len(world.runs()) == 1
    unchanged = [output for output in outputs(world.triggers()) if output["decision"] == "unchanged"]
    assert len(unchanged) == 1
    assert unchanged[0]["message"].startswith(
        "No training started: the dataset under datasets/corpus/ has the hash"
    )
    assert unchanged[0]["manifest"]["objects"] == 3
    # What `trainstack triggers` shows of it.
    lines = describe_trigger(TRIGGER, world.item()[PROFILE], list(reversed(world.triggers()))[:3])
    assert (
        f"  last dataset hash: {unchanged[0]['manifest']['hash']} (trained by run {world.runs()[0]['name']})"
        in lines
    )
    assert "  pending window: none" in lines
    assert any(
        line.startswith("  last decision (") and ": unchanged: No training started" in line for line in lines
    )
    # The re-uploads, newest first: the first of them controlled the window and found the data unchanged.
    recorded = "recorded; the profile's controller execution will see it"
    assert lines[-3].endswith(f"SUCCEEDED {PREFIX}shard-002.bin  {recorded}")
    assert lines[-1].endswith(f"SUCCEEDED {PREFIX}shard-000.bin  unchanged")


def test_new_data_during_a_run_starts_exactly_one_more_after_it(world):
    world = world(job_scripts=[LONG_JOB])
    upload_burst(world, 3, every_minutes=1)
    world.clock.run_until(
        lambda: any(run["status"] == "RUNNING" for run in world.runs()), limit_seconds=86_400
    )
    upload_burst(world, 3, every_minutes=1, name="late")
    world.run_until_idle()

    first, second = world.runs()
    assert [run["status"] for run in (first, second)] == ["SUCCEEDED", "SUCCEEDED"]
    assert second["startDate"] >= first["stopDate"], "at most one triggered run in flight"
    assert decisions(world).count("trained") == 2
    assert json.loads(world.triggers()[-1]["input"])["handover"] is True


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (ImportScript("FAILED", 120, "Failed to import 2 of 3 files."), "DatasetImportFailed"),
        (ImportScript(None), "DatasetImportTimedOut"),
    ],
)
def test_a_failed_or_stuck_fsx_import_ends_the_run_before_training_and_names_the_report(world, script, error):
    """The failed window is retried once (failed_window_retries 1): its second import succeeds, then it
    trains."""
    world = world(fsx_scripts=[script])
    upload_burst(world, 2, every_minutes=1)
    world.run_until_idle()

    (controller,) = [item for item in world.triggers() if item["status"] == "FAILED"]
    assert controller["error"] == error
    task, retried = world.fsx.tasks
    report = f"s3://{FAKE_VALUES['DatasetBucket']}/datasets/fsx-import-reports/{task['TaskId']}/failures.csv"
    assert report in controller["cause"]
    (run,) = world.runs()
    assert run["startDate"].timestamp() + 0.001 >= retried["EndTime"] >= task["CreationTime"] + 15 * MINUTE
    assert task["Lifecycle"] == ("FAILED" if script.outcome else "CANCELED")
    assert "controller" not in world.item()[PROFILE]


def test_with_the_trigger_off_nothing_listens_to_the_bucket(pipeline, default_app):
    settings, stacks, assembly = default_app
    assert settings.retrain_on_new_data is None
    machines = {
        body["Properties"]["StateMachineName"]
        for body in resources(pipeline.template, "AWS::StepFunctions::StateMachine").values()
    }
    assert not any("trigger" in name for name in machines)
    # The only table is the registry's lease table (the default config registers small-torchrun's runs).
    tables = resources(pipeline.template, "AWS::DynamoDB::Table").values()
    assert [table["Properties"]["TableName"] for table in tables] == [lease_table_name("trainstack")]
    storage = assembly.get_stack_by_name(stacks.storage.stack_name).template
    (bucket,) = [
        body
        for name, body in resources(storage, "AWS::S3::Bucket").items()
        if name.startswith("DatasetBucket")
    ]
    # EventBridge stays on whatever the trigger: turning it off must not rewrite FSx's notification.
    assert bucket["Properties"]["NotificationConfiguration"] == {
        "EventBridgeConfiguration": {"EventBridgeEnabled": True}
    }


def test_the_trigger_definition_is_valid_for_aws_tools(templates, pipeline):
    """asl-validator and amazon-states-language-service (AWS's own) accept the trigger machine, with FSx
    and without."""
    from tests.pipeline.test_pipeline_template import aws_validation

    definitions = [
        trigger_machines(templates[variant], pipeline).definitions["trainstack-retrain-trigger"]
        for variant in ("fsx", "no-fsx")
    ]
    assert aws_validation(definitions) == [{"aslValidator": [], "languageService": []}] * 2


def reachable(states: dict, start: str) -> set[str]:
    """The states an execution can go through from `start` (Next, Default, Choices, Catch)."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        state = states[name]
        todo += [step for step in (state.get("Next"), state.get("Default")) if step]
        todo += [rule["Next"] for rule in state.get("Choices", []) + state.get("Catch", [])]
    return seen


def test_every_task_after_the_window_closes_catches_any_error_and_reaches_the_release(templates, pipeline):
    from stacks.pipeline.trigger.triggered_run import RELEASE_STATES

    for variant in ("fsx", "no-fsx"):
        definition = trigger_machines(templates[variant], pipeline).definitions[TRIGGER_MACHINE]
        states = json.loads(definition)["States"]
        tasks = [name for name in reachable(states, "CloseWindow") if states[name]["Type"] == "Task"]
        assert "ManifestPages" in tasks and ("DescribeImport" in tasks) == (variant == "fsx")
        for name in tasks:
            (catch_all,) = [c for c in states[name].get("Catch", []) if "States.ALL" in c["ErrorEquals"]]
            if name != "Release":
                assert reachable(states, catch_all["Next"]) & set(RELEASE_STATES), f"{variant}: {name}"


TRIGGER_MACHINE = f"{PROJECT}-retrain-trigger"


def deny_listing(monkeypatch) -> None:
    from moto.s3.exceptions import S3AccessDeniedError
    from moto.s3.responses import S3Response

    def denied(self):
        raise S3AccessDeniedError()

    monkeypatch.setattr(S3Response, "list_objects_v2", denied)


def fail_describe(fsx: FakeFsx, monkeypatch) -> None:
    from moto.core.exceptions import ServiceException

    def failing(request):
        raise ServiceException("InternalServerError", "An internal error occurred.")

    monkeypatch.setattr(fsx, "describe", failing)


@pytest.mark.parametrize(
    ("inject", "error"),
    [("listing", "DatasetListingFailed"), ("describe", "DatasetImportFailed")],
)
def test_a_persistent_failure_after_the_window_closes_frees_the_profile_and_a_later_upload_trains(
    world, monkeypatch, inject, error
):
    with pytest.MonkeyPatch.context() as failure:
        world = world()
        if inject == "listing":
            deny_listing(failure)
        else:
            fail_describe(world.fsx, failure)
        upload_burst(world, 2, every_minutes=1)
        world.run_until_idle()

        failed = [item for item in world.triggers() if item["status"] == "FAILED"]
        # The window and its one retry (failed_window_retries 1), both named.
        assert [item["error"] for item in failed] == [error, error]
        item = world.item()[PROFILE]
        assert "controller" not in item and "firstEventMillis" not in item
        last = json.loads(item["lastDecision"]["S"])
        assert last["decision"] == "failed" and last["message"].startswith(error)
        assert "No retries left" in last["message"]
        assert world.runs() == []

    world.advance(120 * MINUTE)
    upload_burst(world, 1, every_minutes=1, name="later")
    world.run_until_idle()

    (run,) = world.runs()
    assert run["status"] == "SUCCEEDED"
    assert json.loads(world.item()[PROFILE]["lastDecision"]["S"])["decision"] == "trained"


def test_a_failed_run_is_retried_once_the_prefix_has_been_quiet_again(world):
    failing = [STARTING, failed("AlgorithmError: ExecuteUserScriptError:\nExitCode 1")]
    world = world(job_scripts=[failing, [STARTING, COMPLETED]])
    upload_burst(world, 2, every_minutes=1)
    world.run_until_idle()

    first, second = world.runs()
    assert [first["status"], second["status"]] == ["FAILED", "SUCCEEDED"]
    assert second["startDate"].timestamp() - first["stopDate"].timestamp() >= 15 * MINUTE
    assert decisions(world)[-1] == "trained"
    assert "failedWindows" not in world.item()[PROFILE]
