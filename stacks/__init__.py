"""CDK only: one package per stack (network, storage, image, pipeline) and the app-wide checks beside them.

The pipeline package holds the state machines it deploys: the attempt machines (attempt/), the cleanup
and sweeper machines (cleanup/) and the AWS Batch queue (queue/).
"""
