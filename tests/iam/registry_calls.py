"""The registration machine's calls (stacks/pipeline/registry/) and its evaluation jobs' data reads, for the
representative run of each profile with a `registry:` block (docs/registry.md). Resource types from the
Service Authorization Reference (SageMaker): CreateModelPackage, DescribeModelPackage and
UpdateModelPackage authorize `model-package` (the version); ListModelPackages lists `model-package` too,
but names no single one before the call, so "*" stands for it; the group's lease is PutItem and DeleteItem
on the lease table (DynamoDB's SAR: `table`); ListObjectsV2 is `s3:ListBucket` on the
bucket with the `s3:prefix` key (Amazon S3's SAR)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.iam.training_job_calls import SECURE
from trainstack.registry import EVALUATION_JOBS_LIMIT, evaluation_job_name, group_name


class RegistryCalls:
    """Mixed into CallCatalog: builders named `_<service>_<action>` as task_authorizations looks them up."""

    def registered_profiles(self) -> list:
        return [profile for profile in self.settings.profiles if profile.registry is not None]

    def version_arns(self) -> list[str]:
        return [
            self.arn("sagemaker", f"model-package/{group_name(self.project, profile.name)}/1")
            for profile in self.registered_profiles()
        ]

    def evaluation_create_authorizations(self) -> list[tuple[str, str, dict[str, Any]]]:
        """CreateTrainingJob of each registered profile's evaluation job: the run's request (its tags, its
        training plans, its role) under the evaluation job's name."""
        evaluation_job = self._training_job(self.job)
        found = []
        for profile in self.registered_profiles():
            # The request's own name (`<run>-1`, also in queue mode, where Batch names the training job).
            run_job = self._training_job(self.request(profile)["TrainingJobName"])
            found += [
                (action, evaluation_job if resource == run_job else resource, context)
                for action, resource, context in self.create_authorizations(profile)
            ]
        return found

    def _sagemaker_listModelPackages(self, arguments):  # noqa: N802
        return [(None, "*", {})]

    def _sagemaker_describeModelPackage(self, arguments):  # noqa: N802
        return [(None, arn, {}) for arn in self.version_arns()]

    _sagemaker_createModelPackage = _sagemaker_describeModelPackage
    _sagemaker_updateModelPackage = _sagemaker_describeModelPackage

    def _dynamodb_deleteItem(self, arguments):  # noqa: N802 (the registration's lease, given back)
        return [(None, self.arn("dynamodb", f"table/{arguments['TableName']}"), {})]

    def _ecr_describeImages(self, arguments):  # noqa: N802
        return [(None, self.arn("ecr", f"repository/{self.project}-training"), {})]

    def _s3_listObjectsV2(self, arguments):  # noqa: N802
        """The dataset manifest's child machine lists what its callers name: the registration the dataset
        prefix and the profiles' evaluation sets, the retrain trigger its prefix."""
        bucket = self.arn("s3", self.argument(arguments, "Bucket"), region=False)
        prefixes = []
        if self.registered_profiles():
            prefixes.append(self.resources().dataset_prefix)
            prefixes += [profile.registry.evaluation_prefix for profile in self.registered_profiles()]
        if self.settings.retrain_on_new_data is not None:
            prefixes.append(self.settings.retrain_on_new_data.prefix)
        return [("s3:ListBucket", bucket, {**SECURE, "s3:prefix": prefix}) for prefix in prefixes]

    def evaluation_job_calls(self) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
        """(profile, action, resource, context) of each evaluation job (the first, and the last a run's
        retries can reach): it lists and reads the run's model and the profile's evaluation set, and writes
        its evaluation.json."""
        resources = self.resources()
        for profile in self.registered_profiles():
            request = self.request(profile)
            job = request["TrainingJobName"]
            model = f"s3://{resources.artifact_bucket}/{self.run_name}/{job}/output/model/"
            evaluation_set = f"s3://{resources.dataset_bucket}/{profile.registry.evaluation_prefix}"
            for uri, item in ((model, "model.safetensors"), (evaluation_set, "shard-000.bin")):
                for action, resource, context in self._s3_read(uri, item):
                    yield profile.name, action, resource, context
            output = request["OutputDataConfig"]["S3OutputPath"]
            for number in (1, EVALUATION_JOBS_LIMIT):
                evaluation = evaluation_job_name(self.run_name, number)
                for action, resource, context in self._s3_object(
                    "s3:PutObject", output, f"{evaluation}/output/model/evaluation.json"
                ):
                    yield profile.name, action, resource, context
