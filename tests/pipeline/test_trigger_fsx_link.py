"""Retrain on new data with FSx linked as the storage stack links it: the FSx fake reads the file system's
links (the dataset and the checkpoint associations) from the synthesized storage template, refuses an import
report outside them, as CreateDataRepositoryTask does (CompletionReport.Path, botocore's fsx model), and
fails an import task whose path lies outside them ("If a path that you provide isn't valid, the task
fails": CreateDataRepositoryTask Paths)."""

from __future__ import annotations

import json

import pytest
from moto.core.exceptions import ServiceException

from localaws.demo.trigger_world import trigger_world
from localaws.emulator.fake_fsx import FakeFsx, links_in_template
from localaws.sagemaker import evaluated, scripted_sagemaker
from tests.infra.conftest import FSX_STORE, settings_with, synthesize_infra
from tests.pipeline.conftest import FAKE_VALUES
from tests.pipeline.trigger_machines import PREFIX, PROFILE, trigger_machines, trigger_templates

BUCKET, FILE_SYSTEM = FAKE_VALUES["DatasetBucket"], FAKE_VALUES["FileSystemId"]
CHECKPOINTS = FAKE_VALUES["CheckpointBucket"]
BUCKETS = {"DatasetBucket": BUCKET, "CheckpointBucket": CHECKPOINTS}
MINUTE = 60


def linked_as_synthesized(overrides: dict, outdir) -> dict[str, tuple[str, ...]]:
    infra = synthesize_infra(settings_with(overrides), outdir)
    return links_in_template(infra.storage_template, buckets=BUCKETS, file_system_id=FILE_SYSTEM)


@pytest.fixture(scope="module")
def scratch_links(tmp_path_factory) -> dict[str, tuple[str, ...]]:
    """SCRATCH_2 with the trigger on and the fsx checkpoint store: both associations."""
    trigger = {"retrain_on_new_data": {"profile": "small-torchrun", "prefix": "datasets/corpus/"}}
    return linked_as_synthesized(
        {"fsx": {"deployment_type": "SCRATCH_2"}, **trigger, **FSX_STORE}, tmp_path_factory.mktemp("scratch")
    )


def test_scratch_2_is_linked_at_the_dataset_prefix_and_the_checkpoint_export(scratch_links, pipeline):
    assert scratch_links == {
        FILE_SYSTEM: (
            f"s3://{BUCKET}/{pipeline.settings.dataset.prefix}",
            f"s3://{CHECKPOINTS}/fsx-checkpoints/",
        )
    }


def test_a_burst_on_scratch_2_imports_then_trains(scratch_links, pipeline, monkeypatch):
    fsx = FakeFsx(scratch_links)
    machines = trigger_machines(trigger_templates(pipeline.settings)["fsx"], pipeline)
    sagemaker = scripted_sagemaker(None, evaluation_script=evaluated(2.0))
    with trigger_world(machines, sagemaker, fsx, monkeypatch) as world:
        for index in range(3):
            world.upload(f"{PREFIX}shard-{index:03d}.bin", f"shard{index}".encode())
            world.advance(MINUTE)
        world.run_until_idle()

        (run,) = world.runs()
        assert run["status"] == "SUCCEEDED"
        decisions = [
            json.loads(item["output"])["decision"] for item in world.triggers() if item.get("output")
        ]
        assert decisions.count("trained") == 1
        (task,) = fsx.tasks
        assert task["Lifecycle"] == "SUCCEEDED"
        dataset_link, _ = scratch_links[FILE_SYSTEM]
        assert task["Report"]["Path"].startswith(dataset_link), "the report lies within the dataset's link"
        assert task["Paths"][0].startswith(dataset_link), "so does the imported prefix"
        assert "controller" not in world.item()[PROFILE]


def request(report_path: str, path: str = f"s3://{BUCKET}/datasets/corpus/") -> dict:
    return {
        "Type": "IMPORT_METADATA_FROM_REPOSITORY",
        "FileSystemId": FILE_SYSTEM,
        "Paths": [path],
        "Report": {
            "Enabled": True,
            "Path": report_path,
            "Format": "REPORT_CSV_20191124",
            "Scope": "FAILED_FILES_ONLY",
        },
    }


@pytest.mark.parametrize(
    ("report", "accepted"),
    [
        (f"s3://{BUCKET}/datasets/fsx-import-reports", True),
        (f"s3://{BUCKET}/datasets", True),
        (f"s3://{BUCKET}/fsx-import-reports", False),  # beside the association, not within it
        (f"s3://{BUCKET}/datasets-old/reports", False),  # a longer prefix is not within it
        ("s3://another-bucket/datasets/fsx-import-reports", False),
    ],
)
def test_the_fake_refuses_a_report_outside_the_association(report, accepted):
    fsx = FakeFsx({FILE_SYSTEM: (f"s3://{BUCKET}/datasets/",)})
    if accepted:
        assert fsx.create(request(report))["DataRepositoryTask"]["Report"]["Path"] == report
        return
    with pytest.raises(ServiceException) as refused:
        fsx.create(request(report))
    assert refused.value.code == "BadRequest"
    assert report in refused.value.message


def test_an_import_path_link_accepts_reports_only_within_its_export_path():
    """The legacy link (what SCRATCH_2 had): ImportPath without ExportPath exports to
    s3://bucket/FSxLustre<creation time>, so a report under the dataset prefix is refused."""
    template = {
        "Resources": {
            "Datasets": {"Type": "AWS::S3::Bucket", "Properties": {}},
            "FileSystem": {
                "Type": "AWS::FSx::FileSystem",
                "Properties": {
                    "LustreConfiguration": {
                        "DeploymentType": "SCRATCH_2",
                        "ImportPath": {"Fn::Join": ["", ["s3://", {"Ref": "Datasets"}, "/datasets/"]]},
                    }
                },
            },
        }
    }
    links = links_in_template(template, buckets={"Datasets": BUCKET}, file_system_id=FILE_SYSTEM)
    ((export_path,),) = links.values()
    assert export_path.startswith(f"s3://{BUCKET}/FSxLustre")
    with pytest.raises(ServiceException):
        FakeFsx(links).create(request(f"s3://{BUCKET}/datasets/fsx-import-reports"))
    assert FakeFsx(links).create(request(f"{export_path}/reports"))["DataRepositoryTask"]["TaskId"]


@pytest.mark.parametrize(
    ("report", "path", "ends"),
    [
        (f"s3://{BUCKET}/datasets/fsx-import-reports", f"s3://{BUCKET}/datasets/corpus/", "SUCCEEDED"),
        # Within the checkpoint association: a report there is accepted, as is an import of its prefix.
        (
            f"s3://{CHECKPOINTS}/fsx-checkpoints/reports",
            f"s3://{CHECKPOINTS}/fsx-checkpoints/a/",
            "SUCCEEDED",
        ),
        (f"s3://{BUCKET}/datasets/fsx-import-reports", f"s3://{BUCKET}/elsewhere/", "FAILED"),
        (f"s3://{BUCKET}/datasets/fsx-import-reports", f"s3://{CHECKPOINTS}/trainstack-run/", "FAILED"),
        (f"s3://{CHECKPOINTS}/trainstack-run/reports", f"s3://{BUCKET}/datasets/corpus/", "refused"),
    ],
)
def test_the_fake_knows_both_associations_of_the_synthesized_file_system(scratch_links, report, path, ends):
    """A report outside both associations is refused; an import path outside both fails the task."""
    fsx = FakeFsx(scratch_links, now=lambda: 0.0)
    if ends == "refused":
        with pytest.raises(ServiceException) as refused:
            fsx.create(request(report, path))
        assert refused.value.code == "BadRequest" and report in refused.value.message
        return
    task = fsx.create(request(report, path))["DataRepositoryTask"]
    fsx.now = lambda: 3600.0
    (described,) = fsx.describe({"TaskIds": [task["TaskId"]]})["DataRepositoryTasks"]
    assert described["Lifecycle"] == ends
    if ends == "FAILED":
        assert path in described["FailureDetails"]["Message"]
