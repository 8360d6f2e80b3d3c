"""CDK stacks (one per module) and the constructs they share."""
