"""The image stack: the ECR repository and the training image built from container/."""
