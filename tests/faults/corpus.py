"""The corpus of real failure texts (failure_texts.yaml) and the FailureReason each one becomes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

CORPUS = Path(__file__).with_name("failure_texts.yaml")
# SageMaker reports the first 1,024 characters of the failure file (sagemaker-training 5.1.4 files.py).
REASON_CHARS = 1024
CLASSES = ("capacity", "infrastructure", "user", "unknown")


@dataclass(frozen=True)
class Entry:
    id: str
    text: str
    source: str
    reaches: str
    fault_class: str
    kind: str
    why: str
    debatable: bool = False
    wrong: str | None = None  # the class a debatable entry must not get
    exception: str | None = None
    exit_code: int = 1
    adapted: str | None = None

    @property
    def failure_reason(self) -> str:
        """The text as DescribeTrainingJob would return it."""
        if self.reaches == "toolkit-error":
            return f"AlgorithmError: {self.text}"
        if self.reaches == "script-output":  # sagemaker-training 5.1.4 errors.py _CalledProcessError.__str__
            wrapped = (
                "AlgorithmError: ExecuteUserScriptError:\n"
                f'ExitCode {self.exit_code}\nErrorMessage "{self.text}"\n'
                'Command "/opt/conda/bin/python3.11 train.py"'
            )
            return wrapped[:REASON_CHARS]
        return self.text

    def accepts(self, fault_class: str, kind: str) -> bool:
        """Whether a classification is right: the class and kind, or for a debatable text anything but the
        class that would certainly be wrong."""
        if self.debatable:
            return fault_class != self.wrong
        return (fault_class, kind) == (self.fault_class, self.kind)


def load() -> list[Entry]:
    entries = []
    for raw in yaml.safe_load(CORPUS.read_text()):
        fields = dict(raw)
        fields["fault_class"] = fields.pop("class")
        fields["wrong"] = fields.pop("not", None)
        entries.append(Entry(**fields))
    return entries


def confusion(entries: list[Entry], classify: Callable[[str], str]) -> Counter[tuple[str, str]]:
    """(true class, class given) counts for a classifier of FailureReasons."""
    return Counter((entry.fault_class, classify(entry.failure_reason)) for entry in entries)


def confusion_table(counts: Counter[tuple[str, str]]) -> str:
    header = "| true \\ given | " + " | ".join(CLASSES) + " |"
    rows = [header, "|" + " --- |" * (len(CLASSES) + 1)]
    for true in CLASSES:
        rows.append(f"| {true} | " + " | ".join(str(counts[(true, given)]) for given in CLASSES) + " |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m tests.faults.corpus: the current table's confusion table
    from trainstack.faults import classify

    print(confusion_table(confusion(load(), lambda reason: classify(reason).fault_class)))
