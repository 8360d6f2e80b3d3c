"""The training image's launch, run here: `container/train` with the image's environment, the toolkit
versions the image carries (.venv-image), `/opt/ml` as SageMaker lays it out, and stand-in launchers that
record what they were asked to run. tests/training/test_launch_matrix.py runs it for every shipped profile.

Where each input comes from:
- The image's environment: the ENV instructions of container/Dockerfile's final stage, parsed here, on top
  of the base's as AWS's PyTorch 2.5.1 DLC Dockerfile sets it (`DLC_BASE_ENV`), which SMP's image extends.
- `/opt/ml` as SageMaker writes it (localaws/opt_ml.py, with its sources), from the product's own
  CreateTrainingJob request: its HyperParameters, its channels, its first instance preference.

What cannot run on this machine is replaced, and nothing else:
- `torchrun`, `mpirun`, `smddprun`: stand-ins first on PATH that record argv and environment, exit 0.
- `nvidia-smi`: lists the instance type's GPUs (the toolkit counts `GPU ` lines of `nvidia-smi --list-gpus`,
  environment.py num_gpus), so the launch uses the GPU count it would see on that instance.
- `ssh`: the MPI launchers `ssh <worker> touch /tmp/done.<master>` after mpirun (mpi.py _write_status_file).
- Inside the toolkit's process (a sitecustomize on PYTHONPATH; nothing else imports it): the two DNS waits
  for every host (sagemaker_pytorch_container training.py and sagemaker_training entry_point.py, both
  _dns_lookup, up to 15 minutes for a name that never resolves), the MPI launchers' `/usr/sbin/sshd -D`
  start (an absolute path: mpi.py and smdataparallel.py _start_sshd_daemon), their paramiko probe of each
  worker's port 22 (_can_connect), and their fixed 30 s sleep after mpirun (mpi.py MasterRunner.run,
  smdataparallel.py SMDataParallelRunner.run): each is recorded instead.
- `SAGEMAKER_BASE_DIR` (the toolkit's own variable, environment.py) points /opt/ml at a temporary tree.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from localaws import opt_ml
from tests.domain.conftest import shipped_resources
from trainstack.instances import instance_type
from trainstack.job_request import RunRequest, build_create_training_job_request
from trainstack.profiles import Profile

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "container" / "Dockerfile"
VENV_BIN = Path(sys.executable).parent
LAUNCHERS = ("torchrun", "mpirun", "smddprun")

# AWS's PyTorch 2.5.1 training DLC (aws/deep-learning-containers, pytorch/training/docker/2.5/py3/cu124/
# Dockerfile.gpu at 64a7c2365dca8626258cd86b09c9f7fd5f2a22c6): the variables the launch reads, in order.
# The CUDA base's PATH (nvidia/cuda:12.4.1-base-ubuntu22.04) comes first.
DLC_BASE_ENV = (
    (
        "PATH",
        "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/bin",
    ),
    ("CUDA_HOME", "/opt/conda"),  # line 67 (line 66 sets /usr/local/cuda first)
    ("PATH", "/opt/conda/bin:${PATH}"),  # line 71
    ("PATH", "${CUDA_HOME}/bin:${PATH}"),  # line 72
    ("EFA_PATH", "/opt/amazon/efa"),  # line 73
    ("OPEN_MPI_PATH", "/opt/amazon/openmpi"),  # line 74
    ("PYTHONUNBUFFERED", "1"),  # line 79
    # line 147; the mpirun there is a script adding --allow-run-as-root (lines 151-154)
    ("PATH", "${OPEN_MPI_PATH}/bin:${EFA_PATH}/bin:${PATH}"),
    ("SAGEMAKER_TRAINING_MODULE", "sagemaker_pytorch_container.training:main"),  # line 352
)
# Image folders and what stands for them here: the conda Python is the image-stack venv, /opt/trainstack/bin
# holds container/train. The stand-in launchers come before all of them.
IMAGE_PATHS = {"/opt/conda/bin": VENV_BIN, "/opt/trainstack/bin": REPO / "container"}

SITECUSTOMIZE = """
import json, os, time
from sagemaker_pytorch_container import training
from sagemaker_training import entry_point, mpi, smdataparallel

def record(kind, **fields):
    with open(os.environ["TRAINSTACK_LAUNCH_RECORD"], "a") as file:
        file.write(json.dumps({"kind": kind, **fields}) + "\\n")

class NoWait:
    time = staticmethod(time.time)
    sleep = staticmethod(lambda seconds: record("sleep", seconds=seconds))

training._dns_lookup = entry_point._dns_lookup = lambda host: record("dns", host=host)
for module in (mpi, smdataparallel):
    module._start_sshd_daemon = lambda: record("sshd")
    module._can_connect = lambda host, port=22: record("ssh-probe", host=host) or True
    module.time = NoWait
"""

RECORDER = """#!{python} -I
import json, os, sys
with open(os.environ["TRAINSTACK_LAUNCH_RECORD"], "a") as file:
    file.write(json.dumps({{"kind": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                           "env": dict(os.environ)}}) + "\\n")
"""


def dockerfile_env(text: str, base: dict[str, str]) -> dict[str, str]:
    """The environment after the ENV instructions of the Dockerfile's last stage, `${NAME}` expanded."""
    logical = re.sub(r"\\\n", " ", text)
    stage = re.split(r"^FROM .*$", logical, flags=re.MULTILINE)[-1]
    environment = dict(base)
    for line in stage.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[len("ENV ") :]):
                name, value = pair.split("=", 1)
                environment[name] = expand(value, environment)
    return environment


def expand(value: str, environment: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda match: environment.get(match.group(1), ""), value)


def base_image_env() -> dict[str, str]:
    environment: dict[str, str] = {}
    for name, value in DLC_BASE_ENV:
        environment[name] = expand(value, environment)
    return environment


@dataclass
class Launch:
    """What one host's `train` started: the launcher's record, the toolkit's other recorded steps, its log."""

    records: list[dict]
    returncode: int
    output: str

    def launcher(self) -> dict:
        launched = [record for record in self.records if record["kind"] in LAUNCHERS]
        assert len(launched) == 1, (launched, self.output)
        return launched[0]

    def steps(self, kind: str) -> list[dict]:
        return [record for record in self.records if record["kind"] == kind]


def job_request(profile: Profile) -> dict:
    run = RunRequest(profile.name, "trainstack-run")
    return build_create_training_job_request(profile, shipped_resources(profile), run, attempt=1)


def launch(profile: Profile, root: Path, dockerfile_text: str | None = None, timeout: float = 300) -> Launch:
    """`train` on the first host of the profile's first instance preference (SageMaker's first choice)."""
    preference = profile.instance_preferences[0]
    request = job_request(profile)
    base = root / "ml"
    opt_ml.lay_out(
        base,
        request["HyperParameters"],
        opt_ml.resource_config(preference.instance_type, preference.instance_count),
        opt_ml.input_data_config(request),
    )

    stand_ins = _stand_ins(root / "stand-ins", instance_type(preference.instance_type).gpus)
    image = dockerfile_env(dockerfile_text or DOCKERFILE.read_text(), base_image_env())
    path = [str(IMAGE_PATHS.get(folder, folder)) for folder in image["PATH"].split(":")]
    record = root / "launch.jsonl"
    record.touch()
    environment = {
        **image,
        **request["Environment"],
        "PATH": os.pathsep.join([str(stand_ins), *path]),
        "HOME": str(root),
        "SAGEMAKER_BASE_DIR": str(base),
        "TRAINSTACK_SKIP_PREFLIGHT": "1",  # the preflight checks the GPU host itself (tests/container)
        "TRAINSTACK_LAUNCH_RECORD": str(record),
        "PYTHONPATH": str(stand_ins / "python"),
    }
    entry = shutil.which("train", path=environment["PATH"])
    assert entry == str(REPO / "container" / "train"), entry  # the image's PATH puts our wrapper first
    result = subprocess.run(
        [entry, "train"], env=environment, cwd=root, capture_output=True, text=True, timeout=timeout
    )
    records = [json.loads(line) for line in record.read_text().splitlines()]
    return Launch(records, result.returncode, result.stdout + result.stderr)


def _stand_ins(folder: Path, gpus: int) -> Path:
    (folder / "python").mkdir(parents=True)
    (folder / "python" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    commands = {name: RECORDER.format(python=sys.executable) for name in (*LAUNCHERS, "ssh")}
    gpu_lines = "".join(f"GPU {index}: stand-in (UUID: GPU-{index})\\n" for index in range(gpus))
    commands["nvidia-smi"] = f"#!/bin/sh\nprintf '{gpu_lines}'\n"
    for name, text in commands.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder
