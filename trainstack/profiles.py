"""Training profiles: what a pipeline execution runs (strategy, instance preferences, retry policy).

A profile is validated when the config is loaded (synth, `trainstack check-config`): every rule
below ends in one sentence naming the field and what is allowed. docs/pipeline-usage.md lists
every field with its meaning and default.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from trainstack.base import StrictModel, matching
from trainstack.checkpoint_stores import DEFAULT_CHECKPOINT_STORE, CheckpointStore
from trainstack.fault_model import FaultModel
from trainstack.in_job_restarts import MAX_RESTARTS_ENV, TORCHRUN_STRATEGIES, InJobRestartPolicy
from trainstack.instances import INSTANCE_TYPES, InstanceType, UnknownInstanceTypeError, instance_type
from trainstack.launch_flags import EXPECTED_GPUS_ENV, RESERVED_HYPERPARAMETERS, Strategy
from trainstack.registry_settings import EvaluationSettings, RegistrySettings
from trainstack.retry_policies import FaultRetryPolicy, RetryPolicy
from trainstack.slow_host import SlowHostPolicy
from trainstack.team_code import ENTRY_PATTERN

# SageMaker's limit on StoppingCondition.MaxRuntimeInSeconds (28 days), in hours.
MAX_RUNTIME_HOURS_LIMIT = 28 * 24
# AWS Batch's schedulingPriority range is 0-9999.
MAX_PRIORITY = 9999

# EventBridge Scheduler expressions: rate(...), cron(...) (6 fields) or at(...).
_SCHEDULE_PATTERN = (
    r"^(rate\(\d+ (minute|minutes|hour|hours|day|days)\)"
    r"|cron\(\S+ \S+ \S+ \S+ \S+ \S+\)"
    r"|at\(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\))$"
)
_HYPERPARAMETER_NAME = Annotated[
    str,
    matching(
        r"^[A-Za-z_][A-Za-z0-9_.-]{0,255}$",
        "a name of up to 256 letters, digits, _ . or - that starts with a letter or _",
    ),
]


def _as_text(value: Any) -> Any:
    """YAML numbers and booleans become the strings SageMaker needs (true -> "true", 3e-4 -> "0.0003")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


_HYPERPARAMETER_VALUE = Annotated[str, BeforeValidator(_as_text), Field(max_length=2500)]
_ENV_NAME = Annotated[
    str,
    matching(
        r"^[A-Za-z_][A-Za-z0-9_]{0,511}$",
        "a variable name of letters, digits and _ not starting with a digit",
    ),
]
_ENV_VALUE = Annotated[str, BeforeValidator(_as_text), Field(max_length=512)]


# SageMaker's TrackingServerArn pattern (botocore's sagemaker model) with its TrackingServerName's.
MLFLOW_TRACKING_SERVER_ARN_PATTERN = (
    r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:mlflow-tracking-server/"
    r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,255}$"
)
_MLFLOW_TRACKING_SERVER_ARN = Annotated[
    str | None,
    matching(
        MLFLOW_TRACKING_SERVER_ARN_PATTERN,
        "a SageMaker managed MLflow tracking server ARN "
        "(arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)",
    ),
]
_TRAINING_PLAN_ARN = Annotated[
    str | None,
    matching(
        r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.+$",
        "a SageMaker training plan ARN (arn:aws:sagemaker:<region>:<account>:training-plan/<name>)",
    ),
]


class InstancePreference(StrictModel):
    instance_type: str
    instance_count: Annotated[int, Field(ge=1, le=512)] = 1
    # Reserved capacity for this instance type (a training plan reserves one type): SageMaker's
    # InstancePreferences[].TrainingPlanArns.
    training_plan_arn: _TRAINING_PLAN_ARN = None

    @field_validator("instance_type")
    @classmethod
    def _known(cls, value: str) -> str:
        try:
            instance_type(value)
        except UnknownInstanceTypeError as error:
            raise ValueError(str(error)) from None
        return value

    @property
    def spec(self) -> InstanceType:
        return instance_type(self.instance_type)

    @property
    def world_size(self) -> int:
        """GPUs across all instances of this preference."""
        return self.spec.gpus * self.instance_count


class SmpParameters(StrictModel):
    """SMP v2 core configuration, sent as the `mp_parameters` hyperparameter; unset keys keep SMP defaults.

    Names and meanings:
    https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-model-parallel-v2-reference.html
    """

    hybrid_shard_degree: Annotated[int | None, Field(ge=0)] = None
    tensor_parallel_degree: Annotated[int | None, Field(ge=1)] = None
    context_parallel_degree: Annotated[int | None, Field(ge=1)] = None
    expert_parallel_degree: Annotated[int | None, Field(ge=1)] = None
    sm_activation_offloading: bool | None = None
    activation_loading_horizon: Annotated[int | None, Field(ge=1)] = None
    fsdp_cache_flush_warnings: bool | None = None
    allow_empty_shards: bool | None = None
    random_seed: Annotated[int | None, Field(ge=0)] = None

    @model_validator(mode="after")
    def _no_model_parallelism_yet(self) -> SmpParameters:
        for name in ("tensor_parallel_degree", "context_parallel_degree"):
            degree = getattr(self, name)
            if degree is not None and degree > 1:
                raise ValueError(
                    f"smp.{name} must be 1 (got {degree}): train.py does not yet clip gradients with "
                    "SMP's clip_grad_norm_ or save checkpoints per tensor-parallel rank as AWS's SMP v2 "
                    "examples do, so model parallelism stays off until that is built and verified on GPUs"
                )
        if self.sm_activation_offloading:
            raise ValueError(
                "smp.sm_activation_offloading must be false: train.py does not wrap the model in torch's "
                "offload_wrapper as AWS's SMP v2 example does (docs/training.md)"
            )
        return self

    def as_mp_parameters(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TeamCodeDefaults(StrictModel):
    """A profile's `code:` block: what `trainstack start --code DIR` uses unless told (team_code)."""

    entry_point: Annotated[
        str, matching(ENTRY_PATTERN, "a relative path to a .py or .sh file in the team's code directory")
    ]


class Profile(StrictModel):
    name: Annotated[
        str,
        matching(r"^[a-z][a-z0-9-]{0,30}$", "up to 31 lowercase letters, digits or - starting with a letter"),
    ]
    strategy: Strategy
    entry_point: Annotated[
        str, matching(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.(py|sh)$", "a relative path to a .py or .sh file")
    ] = "train.py"
    instance_preferences: Annotated[list[InstancePreference], Field(min_length=1, max_length=5)]
    volume_size_gb: Annotated[int, Field(ge=1, le=16_384)] = 200
    max_runtime_hours: Annotated[float, Field(gt=0, le=MAX_RUNTIME_HOURS_LIMIT)] = 24
    managed_spot: bool = False
    max_wait_hours: Annotated[float | None, Field(gt=0, le=MAX_RUNTIME_HOURS_LIMIT)] = None
    smp: SmpParameters | None = None
    hyperparameters: dict[_HYPERPARAMETER_NAME, _HYPERPARAMETER_VALUE] = {}
    keep_alive_seconds: Annotated[int, Field(ge=0, le=21_600)] = 0
    # Shorthand for a profile with one instance type: the plan of that type (instance_preferences.0).
    training_plan_arn: _TRAINING_PLAN_ARN = None
    infra_check: bool = False
    # IPsec between the job's instances: AWS says it "can increase training time, especially if you are
    # using distributed deep learning algorithms" (docs/infrastructure.md, "Encryption").
    inter_container_traffic_encryption: bool = False
    retry: RetryPolicy = RetryPolicy()
    fault_retries: FaultRetryPolicy = FaultRetryPolicy()
    fault_model: FaultModel = FaultModel()  # the config's fault_model unless set here
    slow_host: SlowHostPolicy | None = None  # None: train.py's defaults (flag, never end the attempt)
    # torchrun's restarts inside the job (torchrun and smp only); None: the default budget there.
    in_job_restarts: InJobRestartPolicy | None = None
    schedule: Annotated[
        str | None,
        matching(
            _SCHEDULE_PATTERN,
            "an EventBridge Scheduler expression: rate(1 day), cron(0 2 * * ? *) or at(2026-12-01T02:00:00)",
        ),
    ] = None
    environment: dict[_ENV_NAME, _ENV_VALUE] = {}
    # Queue mode with fair shares: Batch's schedulingPriority, higher runs first within a share.
    priority: int | None = None
    # Cost cap in USD: the input check refuses a run planned above it and the pipeline stops a run billed
    # past it (trainstack/cost_cap.py).
    max_cost_usd: Annotated[float | None, Field(gt=0)] = None
    # SageMaker managed MLflow: jobs log parameters and metrics there (training_scripts/mlflow_log.py)
    mlflow_tracking_server_arn: _MLFLOW_TRACKING_SERVER_ARN = None
    # The MLflow experiment, default the profile's name; with teams `<team>-<it>` (team_tracking.py)
    mlflow_experiment: str | None = None
    registry: RegistrySettings | None = None  # evaluate, register and gate each run (docs/registry.md)
    # The registry's evaluation: the metric its gate compares, the script computing it (registry_settings).
    evaluation: EvaluationSettings | None = None
    # Where the run's checkpoints live and how a restart reads them (trainstack/checkpoint_stores.py).
    checkpoint_store: CheckpointStore = DEFAULT_CHECKPOINT_STORE
    # The team's own code: --entry's default for `trainstack start --code DIR` (docs/own-code.md).
    code: TeamCodeDefaults | None = None

    @field_validator("priority")
    @classmethod
    def _priority_range(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_PRIORITY:
            raise ValueError(f"priority must be a whole number from 0 to {MAX_PRIORITY} (higher runs first)")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _no_launch_flags(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = sorted(set(value) & set(RESERVED_HYPERPARAMETERS))
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)} is set from the profile's strategy and entry_point; "
                f"remove it (reserved names: {', '.join(RESERVED_HYPERPARAMETERS)})"
            )
        return value

    @field_validator("environment")
    @classmethod
    def _no_trainstack_variables(cls, value: dict[str, str]) -> dict[str, str]:
        if EXPECTED_GPUS_ENV in value:
            raise ValueError(f"{EXPECTED_GPUS_ENV} is set by trainstack from the instance catalog; remove it")
        if MAX_RESTARTS_ENV in value:
            raise ValueError(f"{MAX_RESTARTS_ENV} is set by trainstack from in_job_restarts; remove it")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        for message in self._problems():
            raise ValueError(message)
        return self

    def _problems(self):
        """Cross-field rules, in the order they are reported (the first one wins)."""
        preferences = self.instance_preferences
        names = [preference.instance_type for preference in preferences]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            yield f"instance_preferences lists {', '.join(repeated)} more than once; list each type once"
        if self.managed_spot and len(preferences) > 1:
            yield (
                "managed_spot allows exactly one instance_preferences entry (SageMaker's InstancePreferences "
                f"excludes managed spot); this profile lists {len(preferences)}"
            )
        if self.managed_spot and self.max_wait_hours is None:
            yield "managed_spot needs max_wait_hours (time to wait for spot capacity plus run time)"
        if self.max_wait_hours is not None and not self.managed_spot:
            yield "max_wait_hours applies only with managed_spot: true; remove it or enable managed_spot"
        if self.max_wait_hours is not None and self.max_wait_hours < self.max_runtime_hours:
            yield (
                f"max_wait_hours ({self.max_wait_hours:g}) must be at least "
                f"max_runtime_hours ({self.max_runtime_hours:g})"
            )
        if self.managed_spot and any(self.training_plan_arns):
            yield "training_plan_arn uses reserved capacity and cannot be combined with managed_spot"
        if self.training_plan_arn and len(self.instance_preferences) > 1:
            yield (
                "training_plan_arn at profile level is only for one instance type; with several, set "
                "training_plan_arn on the instance_preferences entry whose type the plan reserves"
            )
        if self.training_plan_arn and self.instance_preferences[0].training_plan_arn:
            yield "training_plan_arn is set twice: keep the one on instance_preferences.0"
        # max_cost_usd needs a price per type in the config's region: trainstack.cost_cap.check_cost_caps.
        # Whether the model fits each type is checked once for the whole config (Settings, planning/setups).
        yield from self.placement_problems()

    def placement_problems(self):
        """Rules that depend on instance counts: re-checked when an execution overrides the count."""
        for index, preference in enumerate(self.instance_preferences):
            spec = preference.spec
            where = f"instance_preferences.{index} ({spec.name})"
            if preference.instance_count > 1 and not spec.efa:
                yield (
                    f"{where}: {preference.instance_count} instances need EFA, which {spec.name} lacks; "
                    "use instance_count 1 or an EFA type such as ml.p4d.24xlarge or ml.p5.48xlarge"
                )
            if self.strategy == "smddp" and not spec.smddp_for_training:
                yield (
                    f"{where}: strategy smddp runs only on {', '.join(_smddp_types())} (AWS's SMDDP list "
                    "less ml.p3dn.24xlarge, whose V100 GPUs cannot compute in bf16 as train.py does)"
                )
            if self.strategy == "smp" and spec.gpus == 0:
                yield f"{where}: strategy smp needs GPU instances; {spec.name} has none"
        if self.slow_host is not None and self.strategy == "mpi":
            yield "slow_host applies to train.py's strategies (smp, smddp, torchrun), not to strategy mpi"
        if self.in_job_restarts is not None and self.strategy not in TORCHRUN_STRATEGIES:
            yield (
                f"in_job_restarts applies to strategies {' and '.join(TORCHRUN_STRATEGIES)} (torchrun "
                f"restarts the workers); strategy {self.strategy} runs under mpirun, which cannot restart "
                "its ranks: remove it"
            )
        if self.smp is not None and self.strategy != "smp":
            yield f"smp parameters apply only to strategy smp; this profile's strategy is {self.strategy}"
        if self.strategy == "mpi":
            gpu_counts = {preference.spec.gpus for preference in self.instance_preferences}
            if len(gpu_counts) > 1:
                yield (
                    "strategy mpi starts one process per GPU, fixed in the request, so every preferred type "
                    f"must have the same number of GPUs; these have {', '.join(map(str, sorted(gpu_counts)))}"
                )
        if self.smp is None or self.strategy != "smp":
            return
        hybrid_shard = self.smp.hybrid_shard_degree
        for index, preference in enumerate(self.instance_preferences):
            spec = preference.spec
            where = f"instance_preferences.{index} ({spec.name})"
            if hybrid_shard and preference.world_size % hybrid_shard:
                yield (
                    f"smp.hybrid_shard_degree ({hybrid_shard}) must divide the world size of every "
                    f"preferred type; {where} has {preference.world_size} GPUs "
                    f"({spec.gpus} x {preference.instance_count})"
                )

    @property
    def training_plan_arns(self) -> list[str | None]:
        """The training plan of each instance preference, in order (None: on-demand capacity)."""
        return [
            preference.training_plan_arn or (self.training_plan_arn if index == 0 else None)
            for index, preference in enumerate(self.instance_preferences)
        ]

    @property
    def uses_instance_preferences(self) -> bool:
        """Managed spot excludes InstancePreferences: spot jobs name one InstanceType instead."""
        return not self.managed_spot

    @property
    def processes_per_host(self) -> int:
        """One process per GPU (one on CPU types); strategy mpi needs all preferred types to agree."""
        return max(self.instance_preferences[0].spec.gpus, 1)

    def with_instance_count(self, count: int) -> Profile:
        """This profile with every preference at `count` instances (an execution's instanceCount)."""
        preferences = [
            preference.model_copy(update={"instance_count": count})
            for preference in self.instance_preferences
        ]
        return self.model_copy(update={"instance_preferences": preferences})


def _smddp_types() -> list[str]:
    return [name for name, spec in INSTANCE_TYPES.items() if spec.smddp_for_training]
