"""Where a run's checkpoints live: the names a profile's `checkpoint_store` takes (issue 41).

- `sagemaker-sync`: SageMaker's checkpoint sync (`CheckpointConfig`): every node downloads the whole
  checkpoint prefix before training starts.
- `s3-direct`: DCP writes and reads through `s3torchconnector` in the checkpoint bucket; each rank reads
  only its own shards and SageMaker's sync is off.
- `s3-express`: the same, in an S3 directory bucket (S3 Express One Zone) in the training AZ, one per team
  (trainstack/express_buckets.py).
- `fsx`: the team's directory on the mounted FSx for Lustre file system, exported to S3 for durability.
"""

from __future__ import annotations

from typing import Literal, get_args

CheckpointStore = Literal["sagemaker-sync", "s3-direct", "s3-express", "fsx"]
CHECKPOINT_STORES: tuple[str, ...] = get_args(CheckpointStore)
DEFAULT_CHECKPOINT_STORE: CheckpointStore = "sagemaker-sync"
# Stores whose checkpoints train.py reads and writes in S3 itself (s3torchconnector): a resume from a run's
# checkpoints is read the same way, each rank its own shards, instead of a channel every node downloads
# whole (trainstack.job_request.resumes_directly).
S3_DIRECT_STORES: tuple[str, ...] = ("s3-direct", "s3-express")
