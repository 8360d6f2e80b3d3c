"""With teams, queue mode's one AWS Batch job queue, shared by every team's pipeline: fair share between
the teams' shares (trainstack/teams.py). Without teams the queue lives in the pipeline stack, as it always
has."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from stacks.pipeline.queue.training_queue import TrainingQueue
from trainstack.queue_settings import QueueSettings


class QueueStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, project: str, queue: QueueSettings, **kwargs
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="trainstack queue: the teams' shared AWS Batch job queue",
            **kwargs,
        )
        self.queue = TrainingQueue(self, "Queue", project=project, queue=queue)
