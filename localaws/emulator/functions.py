"""JSONata as Step Functions evaluates it: jsonata-python plus the functions Step Functions adds
($partition, $range, $hash, $random, $uuid, $parse), with $now()/$millis() read from the emulator's clock.

Semantics follow the Step Functions developer guide ("Transforming data with JSONata", section
"JSONata functions provided by Step Functions") and the intrinsics they replace (States.ArrayPartition,
States.ArrayRange, States.Hash, States.MathRandom, States.UUID, States.StringToJson).
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from localaws.emulator.clock import Clock

HASH_ALGORITHMS = {
    "MD5": "md5",
    "SHA-1": "sha1",
    "SHA-256": "sha256",
    "SHA-384": "sha384",
    "SHA-512": "sha512",
}
# States.ArrayRange's limit, which $range keeps.
MAX_RANGE_ITEMS = 1000
# The longest string States.Hash hashes: LocalStack's interpreter (moto's copy:
# asl/component/intrinsic/function/statesfunction/hash_calculations/hash_func.py, MAX_INPUT_CHAR_LEN) and
# aws-local-stepfunctions (StatesHash: "cannot hash a string with more than 10,000 characters") both
# refuse longer ones. Assumed: $hash, which replaces States.Hash, keeps the limit (no AWS page gives it).
MAX_HASH_INPUT_CHARACTERS = 10_000


class StepFunctionsFunctionError(ValueError):
    """A Step Functions function called with arguments AWS rejects (the state fails with
    States.QueryEvaluationError)."""


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise StepFunctionsFunctionError(f"{what} must be an integer, got {value!r}")
    return int(value)


def partition(array: Any, chunk_size: Any) -> list[list[Any]]:
    """$partition(array, chunkSize): consecutive chunks of chunkSize items; the last may be shorter."""
    if not isinstance(array, list):
        raise StepFunctionsFunctionError(f"$partition expects an array, got {array!r}")
    size = _integer(chunk_size, "$partition's chunk size")
    if size < 1:
        raise StepFunctionsFunctionError(f"$partition's chunk size must be at least 1, got {size}")
    return [list(array[i : i + size]) for i in range(0, len(array), size)]


def range_(start: Any, end: Any, step: Any) -> list[int]:
    """$range(start, end, step): start, start+step, ... up to and including end."""
    first, last, increment = (
        _integer(value, f"$range's {name}")
        for value, name in ((start, "start"), (end, "end"), (step, "step"))
    )
    if increment == 0:
        raise StepFunctionsFunctionError("$range's step must not be 0")
    items = list(range(first, last + (1 if increment > 0 else -1), increment))
    if len(items) > MAX_RANGE_ITEMS:
        raise StepFunctionsFunctionError(
            f"$range may produce at most {MAX_RANGE_ITEMS} items, not {len(items)}"
        )
    return items


def hash_(value: Any, algorithm: Any) -> str:
    """$hash(value, algorithm): the hex digest of the string (at most MAX_HASH_INPUT_CHARACTERS);
    algorithms MD5, SHA-1, SHA-256, SHA-384, SHA-512."""
    if not isinstance(value, str):
        raise StepFunctionsFunctionError(f"$hash expects a string to hash, got {value!r}")
    if len(value) > MAX_HASH_INPUT_CHARACTERS:
        raise StepFunctionsFunctionError(
            f"$hash hashes at most {MAX_HASH_INPUT_CHARACTERS} characters, got {len(value)}"
        )
    if algorithm not in HASH_ALGORITHMS:
        raise StepFunctionsFunctionError(
            f"$hash's algorithm must be one of {', '.join(HASH_ALGORITHMS)}, got {algorithm!r}"
        )
    return hashlib.new(HASH_ALGORITHMS[algorithm], value.encode()).hexdigest()


def random_(seed: Any = None) -> float:
    """$random([seed]): a number in [0, 1); the same seed gives the same number."""
    if seed is None:
        return random.random()
    return random.Random(_integer(seed, "$random's seed")).random()


def uuid_() -> str:
    """$uuid(): a version 4 UUID."""
    return str(uuid.uuid4())


def parse(text: Any) -> Any:
    """$parse(jsonString): the JSON value the string holds."""
    if not isinstance(text, str):
        raise StepFunctionsFunctionError(f"$parse expects a string, got {text!r}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StepFunctionsFunctionError(f"$parse could not parse {text!r}: {error}") from error


STEP_FUNCTIONS_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "partition": partition,
    "range": range_,
    "hash": hash_,
    "random": random_,
    "uuid": uuid_,
    "parse": parse,
}


def jsonata_evaluator(clock: Clock) -> Callable[[str], Any]:
    """moto's evaluator hook: evaluate a whole (self-contained) JSONata expression."""
    from jsonata import Jsonata
    from jsonata.functions import Functions

    def evaluate(expression: str) -> Any:
        compiled = Jsonata(expression)
        # One instant per evaluation, as JSONata's own $now()/$millis() behave.
        millis = clock.millis()
        compiled.register_lambda("millis", lambda: millis)
        compiled.register_lambda(
            "now",
            lambda picture=None, timezone=None: Functions.datetime_from_millis(millis, picture, timezone),
        )
        for name, function in STEP_FUNCTIONS_FUNCTIONS.items():
            compiled.register_lambda(name, function)
        return compiled.evaluate(None)

    return evaluate
