"""With teams, queue mode's one AWS Batch job queue, shared by every team's pipeline: fair share between
the teams' shares (trainstack/teams.py). Without teams the queue lives in the pipeline stack, as it always
has. With queue mode off the stack stays while it holds a kept run-names table
(migrations.keep_run_names_table)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from stacks.pipeline.queue.training_queue import training_queue
from trainstack.queue_settings import QueueSettings


class QueueStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project: str,
        queue: QueueSettings,
        keep_run_names_table: bool = False,
        existing_run_names: str | None = None,
        **kwargs,
    ) -> None:
        """project: what the queue's names start with (trainstack.pipeline_runs.queue_namespace)."""
        super().__init__(
            scope,
            construct_id,
            description="trainstack queue: the teams' shared AWS Batch job queue",
            **kwargs,
        )
        self.queue = training_queue(
            self,
            project=project,
            queue=queue,
            keep_run_names_table=keep_run_names_table,
            existing_run_names=existing_run_names,
        )
