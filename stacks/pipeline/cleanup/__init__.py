"""The cleanup machines: stop the training jobs (or service jobs) whose execution has ended."""
