"""Queue mode: the AWS Batch service environment, job queue and scheduling policy."""
