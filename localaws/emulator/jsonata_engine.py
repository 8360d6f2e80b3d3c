"""The emulator's JSONata engine: jsonata 2.0.6, the JavaScript engine and version Step Functions runs
(developer guide, "Transforming data with JSONata in Step Functions"), with Step Functions' own functions
(jsonata_node.js), in one long-lived Node process per Python process.

Each expression text is compiled once (in Node) and evaluated with its variables passed as bindings, never
written into the expression. The process starts at the first evaluation, again after a fork (each xdist
worker has its own) and after it dies; requests from several threads take turns.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from localaws.emulator.clock import Clock
from localaws.emulator.timestamps import aws_timestamp

NODE_SCRIPT = Path(__file__).with_name("jsonata_node.js")


class JsonataError(Exception):
    """The expression failed to compile or evaluate (jsonata's code, e.g. D3030, and its message)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message


class JsonataEngineError(RuntimeError):
    """The Node process could not be started or died twice on one request."""


@dataclass(frozen=True)
class Outcome:
    """What an evaluation gave: a value, nothing (JSONata's undefined), or a function (not JSON)."""

    value: Any = None
    undefined: bool = False
    unsupported: bool = False


def _encode(value: Any) -> Any:
    # Timestamps that reach an expression are strings as AWS writes them (timestamps.py).
    if isinstance(value, datetime):
        return aws_timestamp(value)
    raise TypeError(f"{type(value).__name__} is not JSON: {value!r}")


class _NodeProcess:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._owner_pid: int | None = None
        self._stderr = None

    def request(self, payload: bytes) -> dict:
        with self._lock:
            for _ in range(2):  # a process found dead is restarted once for the same request
                process = self._running()
                try:
                    process.stdin.write(payload)
                    process.stdin.flush()
                    line = process.stdout.readline()
                except OSError:
                    line = b""
                if line:
                    return json.loads(line)
                error = self._stderr_text()
                self._stop()
            raise JsonataEngineError(
                f"the JSONata engine ({NODE_SCRIPT.name}) stopped: {error or 'no message'}"
            )

    def _running(self) -> subprocess.Popen:
        if self._owner_pid != os.getpid():  # forked: the parent's pipes are not ours to use
            self._process, self._owner_pid = None, os.getpid()
        if self._process is None or self._process.poll() is not None:
            self._start()
        return self._process

    def _start(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise JsonataEngineError("the JSONata engine needs Node.js (`node` on PATH) and `npm ci` run")
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [node, str(NODE_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-2000:]

    def _stop(self) -> None:
        if self._process is not None and self._owner_pid == os.getpid():
            self._process.kill()
            self._process.wait()
        self._process = None

    def close(self) -> None:
        with self._lock:
            self._stop()


_NODE = _NodeProcess()
atexit.register(_NODE.close)


def evaluate(expression: str, bindings: dict[str, Any] | None = None, *, millis: int) -> Outcome:
    """Evaluate a JSONata expression (no input document: Step Functions binds none) with the variables
    `bindings` (names without `$`) at the instant `millis` ($now(), $millis()). Raises JsonataError."""
    payload = json.dumps(
        {"expression": expression, "bindings": bindings or {}, "millis": millis}, default=_encode
    ).encode()
    answer = _NODE.request(payload + b"\n")
    if "error" in answer:
        raise JsonataError(answer["error"]["code"], answer["error"]["message"])
    return Outcome(
        value=answer.get("value"), undefined="undefined" in answer, unsupported="unsupported" in answer
    )


def jsonata_evaluator(clock: Clock) -> Callable[..., Any]:
    """A plain evaluator for tests and tools: the value, None where JSONata gives nothing."""

    def evaluate_on_clock(expression: str, bindings: dict[str, Any] | None = None) -> Any:
        return evaluate(expression, bindings, millis=clock.millis()).value

    return evaluate_on_clock
