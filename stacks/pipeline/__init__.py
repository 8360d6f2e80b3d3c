"""The pipeline stack: the training state machine, its notifications and the SageMaker role."""
