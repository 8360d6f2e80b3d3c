"""The network stack: one VPC, the training subnet in one availability zone, endpoints, security groups."""
