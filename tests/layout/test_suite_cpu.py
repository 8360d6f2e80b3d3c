"""benchmarks/suite_cpu.py, the probe behind the suite's CPU figures: it passes the command's exit status
through, its total is the whole tree's CPU, and its kinds name the environment and the script."""

from __future__ import annotations

import re
import subprocess
import sys

from benchmarks.suite_cpu import label
from tests.conftest import REPO_ROOT

# A grandchild that spends a known CPU time (process_time, not the wall clock), then the command exits 3.
SPIN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5: pass"


def test_the_total_holds_a_grandchilds_cpu_and_the_exit_status_passes_through():
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "suite_cpu.py"),
            "--",
            "sh",
            "-c",
            f'{sys.executable} -c "$SPIN"; exit 3',
        ],
        env={"SPIN": SPIN, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    total = re.search(r"exit 3, \d+ s, ([0-9.]+) CPU-s$", result.stdout, re.MULTILINE)
    assert total and float(total[1]) >= 0.5, result.stdout
    shares = [float(cpu) for cpu in re.findall(r"^ +([0-9.]+) +[0-9.]+% ", result.stdout, re.MULTILINE)]
    # The kinds and "between samples" split the total (each figure rounded to 0.1 s).
    assert abs(sum(shares) - float(total[1])) <= 0.05 * len(shares) + 0.05, result.stdout


def test_a_command_is_required():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "suite_cpu.py")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "give the command to measure after --" in result.stderr


def test_kinds_name_the_environment_and_what_the_interpreter_runs(tmp_path):
    for environment in (".venv", ".venv-image"):
        (tmp_path / environment).mkdir()
        (tmp_path / environment / "pyvenv.cfg").touch()
    image_python, newer_python = tmp_path / ".venv-image/bin/python", tmp_path / ".venv/bin/python3"
    assert label([str(image_python), "-u", "/r/training_scripts/train.py", "--seed", "1"]) == (
        ".venv-image python train.py"
    )
    assert label([str(newer_python), "-m", "pytest", "-n", "2"]) == ".venv python3 -m pytest"
    assert label(["python3", "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) == "python3 -c"
    assert label(["/usr/bin/node", "--max-old-space-size=4069", "/tmp/x/lib/program.js"]) == (
        "node program.js"
    )
    assert label(["node", "-e", "while (true) {}"]) == "node -e"
    assert label(["/p/bin/ubuntu/x86_64/cfn-guard", "validate", "--rules", "r"]) == "cfn-guard"
