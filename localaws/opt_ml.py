"""The /opt/ml tree SageMaker lays out in a training container before it starts it, written to a folder.

Used by the local SageMaker (localaws/sagemaker/local_processes.py) and by the toolkit launch tests
(tests/training), which run in the image's environment: no moto here, only the standard library.

What SageMaker writes, from "How Amazon SageMaker AI provides training information"
(https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-running-container.html):
- `input/config/hyperparameters.json`: the request's HyperParameters, a map of strings.
- `input/config/resourceconfig.json`: `current_host`, `current_instance_type`, `current_group_name`,
  `hosts`, `instance_groups` (`instance_group_name`, `instance_type`, `hosts`), `network_interface_name`
  ("Distributed training configuration"; sagemaker-training 5.1.4 environment.py reads the same keys).
- `input/config/inputdataconfig.json`: per channel `TrainingInputMode`, `S3DistributionType`,
  `RecordWrapperType` ("Input data configuration"; its example writes `FullyReplicated` and `None`).
  The same three keys for an FSx channel (no S3DistributionType in its request) are assumed.
- `input/data/<channel>/`: the channel's files (File mode).
- `model/` and `output/`: where the algorithm writes its model and its failure file.
The code at `code/` is the image's (container/Dockerfile: `COPY training_scripts/ /opt/ml/code/`), or empty
for a team's own code, which the toolkit extracts there itself (container/train moves the image's scripts
aside).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

TRAINING_SCRIPTS = Path(__file__).resolve().parents[1] / "training_scripts"
# SageMaker's name for the one instance group of a job without InstanceGroups (toolkit environment.py).
HOMOGENEOUS_GROUP = "homogeneousCluster"
# A File-mode channel as the page's example writes it.
FILE_CHANNEL = {
    "TrainingInputMode": "File",
    "S3DistributionType": "FullyReplicated",
    "RecordWrapperType": "None",
}


def resource_config(instance_type: str, instance_count: int, current: int = 1) -> dict[str, Any]:
    """resourceconfig.json of host `algo-<current>` of a homogeneous cluster."""
    hosts = [f"algo-{index}" for index in range(1, instance_count + 1)]
    return {
        "current_host": f"algo-{current}",
        "current_instance_type": instance_type,
        "current_group_name": HOMOGENEOUS_GROUP,
        "hosts": hosts,
        "instance_groups": [
            {"instance_group_name": HOMOGENEOUS_GROUP, "instance_type": instance_type, "hosts": hosts}
        ],
        "network_interface_name": "eth0",
    }


def first_choice(request: dict[str, Any]) -> tuple[str, int]:
    """The instance type and count a job runs on: its first InstancePreference, else its ResourceConfig."""
    resources = request["ResourceConfig"]
    preference = (resources.get("InstancePreferences") or [resources])[0]
    return preference["InstanceType"], preference.get("InstanceCount", resources.get("InstanceCount", 1))


def input_data_config(request: dict[str, Any]) -> dict[str, dict[str, str]]:
    """inputdataconfig.json for a CreateTrainingJob request's InputDataConfig."""
    default_mode = request["AlgorithmSpecification"].get("TrainingInputMode", "File")
    return {
        channel["ChannelName"]: {
            "TrainingInputMode": channel.get("InputMode", default_mode),
            "S3DistributionType": channel["DataSource"]
            .get("S3DataSource", {})
            .get("S3DataDistributionType", FILE_CHANNEL["S3DistributionType"]),
            "RecordWrapperType": channel.get("RecordWrapperType", FILE_CHANNEL["RecordWrapperType"]),
        }
        for channel in request.get("InputDataConfig", [])
    }


def lay_out(
    base: Path,
    hyperparameters: dict[str, str],
    resources: dict[str, Any],
    channels: dict[str, dict[str, str]],
    channel_data: dict[str, Path] | None = None,
    image_code: bool = True,
) -> None:
    """Write the tree under `base` (standing for /opt/ml); `channel_data` links channels to local folders;
    image_code=False leaves `code/` empty (a team's own code)."""
    config = base / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (config / "resourceconfig.json").write_text(json.dumps(resources))
    (config / "inputdataconfig.json").write_text(json.dumps(channels))
    for name, folder in (channel_data or {}).items():
        (base / "input" / "data").mkdir(parents=True, exist_ok=True)
        (base / "input" / "data" / name).symlink_to(folder.resolve())
    if image_code:
        shutil.copytree(TRAINING_SCRIPTS, base / "code", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (base / "code").mkdir()
    (base / "output").mkdir()
    (base / "model").mkdir()
