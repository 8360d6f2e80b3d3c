"""A profile's `registry:` block: evaluate every completed run, register it as a model package version and
gate its approval (docs/registry.md, "From run to approved model")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from trainstack.base import StrictModel, matching

# SageMaker's ModelApprovalStatus values a new version can get (botocore sagemaker model, enum
# ModelApprovalStatus).
APPROVED, REJECTED, PENDING = "Approved", "Rejected", "PendingManualApproval"


class RegistrySettings(StrictModel):
    """`evaluation_prefix`: the held-out evaluation set, a key prefix in the dataset bucket (its *.bin files,
    like the train channel's); the same set for every version of the profile. `approval: auto` approves a
    version whose evaluation loss is at most the best (lowest) loss of the Approved versions evaluated the
    same way (same evaluation set manifest, max_eval_tokens and seq_len) plus `loss_tolerance`, an absolute
    amount of loss (not a fraction), and rejects the others; with no such version to compare with, or one
    without a recorded loss, it leaves the version PendingManualApproval, saying why. `manual` leaves every
    version PendingManualApproval. `first_version`: the status of a version when the group has no Approved
    version at all (auto only). `max_eval_tokens` bounds the evaluation's cost."""

    evaluation_prefix: Annotated[
        str,
        matching(
            r"^[A-Za-z0-9!_.*'()-][A-Za-z0-9!_.*'()/-]{0,511}/$",
            "an S3 key prefix ending in / (letters, digits and !_.*'()/- only)",
        ),
    ]
    approval: Literal["auto", "manual"] = "manual"
    first_version: Literal["Approved", "PendingManualApproval"] = PENDING
    loss_tolerance: Annotated[float, Field(ge=0, le=100)] = 0.0
    max_eval_tokens: Annotated[int, Field(ge=1, le=1_000_000_000)] = 1_000_000


def check_held_out_sets(settings: Any) -> Any:
    """Settings' after-validator: an evaluation set lies outside the dataset prefix, which every training job
    reads whole (its train channel), so that no version is evaluated on data it trained on."""
    dataset_prefix = settings.dataset.prefix
    for index, profile in enumerate(settings.profiles):
        held_out = profile.registry and profile.registry.evaluation_prefix
        if held_out and (held_out.startswith(dataset_prefix) or dataset_prefix.startswith(held_out)):
            raise ValueError(
                f"profiles.{index}.registry.evaluation_prefix '{held_out}' overlaps dataset.prefix "
                f"'{dataset_prefix}', which training reads whole; put the held-out set beside it "
                "(like evaluation/<name>/)"
            )
    return settings


# What a metric may be called: it names the evaluation job's metric `evaluation:<name>`, read from log lines
# `eval_<name>=<number>` (training_scripts/metrics.py), and the version's metadata key `evaluation.<name>`.
METRIC_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
# The evaluation script a profile runs (its own, with a team's code): a relative path whose every part starts
# with a letter, a digit or _, so never `.` or `..`.
ENTRY_POINT_PATTERN = r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}/){0,7}[A-Za-z0-9_][A-Za-z0-9_.-]{0,124}\.(py|sh)$"


class EvaluationMetric(StrictModel):
    """The number the gate compares: its name, whether lower (`minimize`) or higher (`maximize`) is better,
    and `tolerance`, an absolute amount of it by which a version may be worse than the best and still pass."""

    name: Annotated[
        str, matching(METRIC_NAME_PATTERN, "1 to 32 lowercase letters, digits or _, first a letter")
    ]
    goal: Literal["minimize", "maximize"]
    tolerance: Annotated[float, Field(ge=0)] = 0.0


class EvaluationSettings(StrictModel):
    """A profile's own evaluation (docs/registry.md, "Your own metric"): the metric its gate compares, and
    the script that computes it (default the product's evaluate.py, which reports loss, perplexity and
    tokens)."""

    metric: EvaluationMetric | None = None
    entry_point: Annotated[
        str | None,
        matching(ENTRY_POINT_PATTERN, "a relative path to a .py or .sh script, without . or .. parts"),
    ] = None


def evaluation_metric(profile: Any) -> EvaluationMetric:
    """The metric a registry profile's gate compares: its own, or the evaluation loss within
    loss_tolerance."""
    if profile.evaluation is not None and profile.evaluation.metric is not None:
        return profile.evaluation.metric
    return EvaluationMetric(name="loss", goal="minimize", tolerance=profile.registry.loss_tolerance)


def check_evaluations(settings: Any) -> Any:
    """Settings' after-validator: an evaluation belongs to a registry profile, with one tolerance."""
    for index, profile in enumerate(settings.profiles):
        if profile.evaluation is None:
            continue
        if profile.registry is None:
            raise ValueError(
                f"profiles.{index}.evaluation: only a profile with a registry: block evaluates its runs; add "
                "registry: or remove evaluation:"
            )
        if profile.evaluation.metric is not None and "loss_tolerance" in profile.registry.model_fields_set:
            raise ValueError(
                f"profiles.{index}.registry.loss_tolerance: the gate compares evaluation.metric "
                f"({profile.evaluation.metric.name}) within evaluation.metric.tolerance; remove "
                "loss_tolerance"
            )
    return settings
