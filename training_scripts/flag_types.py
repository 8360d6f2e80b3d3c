"""Argument types of the training flags (flags.py): each refuses a value in one sentence naming what it
allows, which the parser turns into a UserError."""

import argparse

from data import UserError


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one sentence instead of usage + message
        raise UserError(f"{message[0].upper()}{message[1:]}.")


def boolean(text: str) -> bool:
    # SageMaker passes hyperparameter values as strings: "true", "True", "false", ...
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def at_least(low: int, why: str):
    """An integer type of at least `low`, with the reason for the bound in its error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {low} ({why}), got {text}")
        return value

    return parse


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text}")
    return value


def number(low: float, high: float = float("inf"), low_inclusive: bool = True):
    """A float type within [low, high] (or (low, high] without `low_inclusive`), said in words."""
    if high == float("inf"):
        allowed = f"a number {'of at least' if low_inclusive else 'above'} {low:g}"
    else:
        allowed = f"a number from {low:g} to {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if not (value >= low if low_inclusive else value > low) or not value <= high:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text}")
        return value

    return parse
