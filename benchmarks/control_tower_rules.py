"""cfn-guard over a governed app's templates: every Control Tower rule against the rules synth runs
(stacks/control_tower_rules.py: those that name a resource type the templates hold), side by side.

The templates are config/examples/teams.yaml's with compliance: control-tower, synthesized once. Each
repetition runs cfn-guard both ways, alternating which goes first so that machine noise hits both alike;
the figures are cfn-guard's CPU seconds (user + system, from the children's rusage), and both ways must
fail the same rules.

    .venv/bin/python benchmarks/control_tower_rules.py [--repetitions 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.conftest import NO_ENV, TEAMS_CONFIG, deep_merge, synthesize  # noqa: E402
from tests.infra.control_tower import failed_rules, rules_for, unpack_rules  # noqa: E402
from tests.infra.test_governed import GOVERNED  # noqa: E402
from trainstack.config_loading import parse_settings  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(run: Callable[[], dict[str, set[str]]]) -> tuple[float, dict[str, set[str]]]:
    before = children_cpu()
    failures = run()
    return children_cpu() - before, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    data = deep_merge(yaml.safe_load(TEAMS_CONFIG.read_text()), GOVERNED)
    settings = parse_settings(data, NO_ENV, source="governed teams")
    with tempfile.TemporaryDirectory(prefix="control-tower-rules-") as scratch:
        _, assembly = synthesize(settings, Path(scratch) / "cdk.out")
        templates = sorted(Path(assembly.directory).glob("*.template.json"))
        guard, rules = unpack_rules(Path(scratch))
        ways = {
            "every rule": lambda: failed_rules(guard, rules, templates, every_rule=True),
            "synth's rules": lambda: failed_rules(guard, rules, templates),
        }
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        verdicts = {}
        for repetition in range(args.repetitions):
            order = list(ways) if repetition % 2 == 0 else list(reversed(ways))
            for name in order:
                cpu, verdicts[name] = measured(ways[name])
                seconds[name].append(cpu)
        selected = len(rules_for(rules, templates))
        every = len(list((rules / "cfn-guard").rglob("*.guard")))
    print(f"{len(templates)} templates; {selected} of {every} rules name a resource type they hold")
    for name, figures in seconds.items():
        print(f"{name:>14}: {statistics.median(figures):6.2f} CPU-s (median of {len(figures)})")
    ratio = statistics.median(seconds["synth's rules"]) / statistics.median(seconds["every rule"])
    print(f"synth's rules / every rule: {ratio:.2f}")
    same = verdicts["every rule"] == verdicts["synth's rules"]
    print("the same failures both ways" if same else f"DIFFERENT failures: {verdicts}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
