"""The local AWS world: stand-ins for the AWS services trainstack calls, for the tests and the demos.

Not part of the installed product (pyproject.toml packages only trainstack*): it needs moto, a
development dependency. emulator/ corrects moto's Step Functions and routes the fake Batch into it;
demo/ runs the synthesized state machines against local training processes (`make demo`).
"""
