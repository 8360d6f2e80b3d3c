"""Step Functions keeps at most 25,000 history events per execution: prove every profile stays under it.

The events one poll, one failed attempt and the rest of an execution add are counted from real
executions of the synthesized definition; the worst case is then computed for each profile at its
longest allowed runtime (28 days, or max_wait_hours on spot), with every attempt used.
"""

from __future__ import annotations

import json

from stacks.training_state_machine_definition import (
    CREATE_THROTTLE_RETRIES,
    EVENTS_FIXED,
    EVENTS_PER_ATTEMPT,
    EVENTS_PER_POLL,
    HISTORY_EVENT_LIMIT,
    PollTier,
    worst_case_history_events,
)
from tests.pipeline.harness import CAPACITY_FAILURE, COMPLETED, STARTING, TRAINING


def events(sm, script, name, profile="nccl-test") -> int:
    sm.fake.script(script)
    outcome = sm.run({"profile": profile, "runName": f"trainstack-{name}"}, name=name)
    assert outcome.status == "SUCCEEDED", outcome.cause
    return len(outcome.history)


def test_worst_case_history_stays_under_the_limit_for_every_profile(interpreter, pipeline):
    sm = interpreter()
    few = events(sm, [[STARTING] * 2 + [TRAINING] * 2 + [COMPLETED]], "few")
    more_training = events(sm, [[STARTING] * 2 + [TRAINING] * 12 + [COMPLETED]], "training")
    more_starting = events(sm, [[STARTING] * 12 + [TRAINING] * 2 + [COMPLETED]], "starting")
    retried = events(sm, [[CAPACITY_FAILURE], [STARTING] * 2 + [TRAINING] * 2 + [COMPLETED]], "retried")

    per_long_poll = (more_training - few) / 10
    per_short_poll = (more_starting - few) / 10
    per_poll = max(per_long_poll, per_short_poll)
    # A failed attempt is polled once (its job fails at once here): count the attempt without that poll.
    per_failed_attempt = retried - few - per_poll
    one_attempt_run = few - 5 * per_poll  # 5 polls: 2 Starting, 2 Training, Completed
    assert per_long_poll == per_short_poll == EVENTS_PER_POLL
    # The design's allowance covers the attempt plus CreateTrainingJob's throttling retries (3 events each).
    assert per_failed_attempt + 3 * CREATE_THROTTLE_RETRIES <= EVENTS_PER_ATTEMPT
    assert one_attempt_run <= EVENTS_FIXED

    definition = pipeline.raw_training_definition["States"]
    tiers = [
        PollTier(choice["NumericLessThanEquals"], definition[choice["Next"]]["Result"])
        for choice in definition["ChoosePollInterval"]["Choices"]
    ]
    worst = {
        profile.name: worst_case_history_events(
            profile,
            tiers,
            events_per_poll=int(per_poll),
            events_per_attempt=int(per_failed_attempt) + 3 * CREATE_THROTTLE_RETRIES,
            events_fixed=int(one_attempt_run),
        )
        for profile in pipeline.settings.profiles
    }
    print(
        "measured:",
        json.dumps(
            {
                "per_poll": per_poll,
                "per_failed_attempt": per_failed_attempt,
                "one_attempt_run": one_attempt_run,
                "worst_case": worst,
            }
        ),
    )
    assert max(worst.values()) < HISTORY_EVENT_LIMIT
