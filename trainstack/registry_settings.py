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
