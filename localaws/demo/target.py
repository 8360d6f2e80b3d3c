"""What `make demo CONFIG= TEAM= PROFILE=` rehearses: one pipeline of the config (the team's, with teams) and
one of its profiles, or one sentence saying why the demo cannot run it (DemoRefusal: exit code 2)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from localaws.demo.synthesized import (
    SynthesizedPipeline,
    SynthesizedPipelineError,
    create_tables,
    load_pipeline,
)
from trainstack.config import Settings
from trainstack.config_loading import ConfigError, load_settings
from trainstack.pipeline_runs import PipelineRuns, queue_namespace, runs_for
from trainstack.profiles import Profile
from trainstack.queue_settings import training_queue_name


class DemoRefusal(Exception):
    """A config, team or profile the demo cannot run; str() is one sentence naming the flag."""


@dataclass(frozen=True)
class DemoTarget:
    settings: Settings
    runs: PipelineRuns  # the team's pipeline with teams, else the project's
    profile: Profile

    @property
    def whose(self) -> str:
        return f"team {self.runs.team}" if self.runs.team else self.settings.project

    @property
    def dataset_prefix(self) -> str:
        """Where the pipeline lists the dataset: with teams the team's folder under dataset.prefix, as the
        pipeline stack names it (stacks/pipeline/pipeline_resources.py, team_dataset)."""
        team = self.runs.team
        return f"{self.settings.dataset.prefix}{team}/" if team else self.settings.dataset.prefix

    @property
    def queue_name(self) -> str | None:
        """The AWS Batch job queue every pipeline of the config submits to (queue mode), else None."""
        if not self.settings.queue.enabled:
            return None
        return training_queue_name(queue_namespace(self.settings))

    def pipeline(self, cdk_out: Path) -> SynthesizedPipeline:
        """The pipeline's state machines as `make synth` wrote them: `<namespace>-pipeline`."""
        try:
            return load_pipeline(cdk_out, self.runs.project, self.settings.region, queue_name=self.queue_name)
        except SynthesizedPipelineError as error:
            raise DemoRefusal(str(error)) from None


def demo_target(config: str, team: str | None, profile: str | None) -> DemoTarget:
    """The config's pipeline for `team` and its `profile` (default: the pipeline's first torchrun profile, as
    the demo's local processes run every profile, else its first)."""
    try:
        settings = load_settings(config)
    except ConfigError as error:
        raise DemoRefusal(f"--config {config}: {str(error).rstrip('.')}") from None
    try:
        runs = runs_for(settings, team)
    except ValueError as error:
        raise DemoRefusal(str(error)) from None
    names = [item.name for item in runs.profiles]
    torchrun = [item.name for item in runs.profiles if item.strategy == "torchrun"]
    chosen = profile or (torchrun or names)[0]
    if chosen not in names:
        whose = f"team {runs.team}" if runs.team else f"the config {config}"
        raise DemoRefusal(f"--profile {chosen}: not a profile of {whose}; name one of {', '.join(names)}")
    return DemoTarget(settings, runs, runs.profile(chosen))


def emulate_queue(target: DemoTarget, pipeline: SynthesizedPipeline, sagemaker, clock, monkeypatch) -> None:
    """Queue mode: the config's job queue in the emulated AWS Batch (localaws.emulator.fake_batch), the
    pipeline's shares with their weights, and the tables the synthesized stacks declare."""
    from localaws.emulator.batch_routes import install_fake_batch
    from localaws.emulator.fake_batch import FakeBatch
    from stacks.pipeline.queue.training_queue import weight_factor

    queue = target.settings.queue
    batch = FakeBatch(
        sagemaker=sagemaker,
        max_instances=queue.max_instances,
        queue_name=target.queue_name,
        weight_factors={name: weight_factor(weight) for name, weight in target.runs.queue.shares.items()},
        capacity_wait_seconds=queue.capacity_wait_seconds,
        now=clock.time,
    )
    install_fake_batch(batch, monkeypatch)
    # The run-name table: in the pipeline's stack, or, with teams, in the queue stack all teams share.
    for template in sorted(pipeline.template_path.parent.glob("*.template.json")):
        create_tables(json.loads(template.read_text()), target.settings.region)
