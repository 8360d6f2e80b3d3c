"""The attempt machines: one training job per attempt, created directly or submitted to the queue."""
