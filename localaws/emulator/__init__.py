"""A local AWS Step Functions for tests and demos: moto's interpreter running JSONata state machines with
AWS's error names on a virtual or scaled clock, and the Service Quotas listing moto lacks
(service_quotas.py). Needs the dev dependencies (moto) and `npm ci` (jsonata 2.0.6, run by Node.js).

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with local_stepfunctions(VirtualClock()) as clock:
            ...  # create state machines, start executions; clock.waits lists the Wait states
"""

from localaws.emulator.clock import Clock, ScaledClock, SteppedClock, VirtualClock
from localaws.emulator.errors import aws_sdk_error_name, modelled_error_codes, service_error
from localaws.emulator.service_quotas import apply_quota
from localaws.emulator.session import local_stepfunctions

__all__ = [
    "Clock",
    "ScaledClock",
    "SteppedClock",
    "VirtualClock",
    "apply_quota",
    "aws_sdk_error_name",
    "local_stepfunctions",
    "modelled_error_codes",
    "service_error",
]
