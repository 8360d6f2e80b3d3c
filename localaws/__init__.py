"""The local AWS world: stand-ins for the AWS services trainstack calls, for the tests and the demos.

Not part of the installed product (pyproject.toml packages only trainstack*): it needs moto, a
development dependency. emulator/ corrects moto's Step Functions and routes the fake Batch into it;
sagemaker/ is the one fake SageMaker (scripted jobs for the tests, local training processes for the
demos); opt_ml.py writes the /opt/ml tree SageMaker lays out (standard library only: the image's
environment imports it too); demo/ runs the synthesized state machines against local training
(`make demo`).
"""
