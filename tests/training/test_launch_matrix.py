"""Every shipped profile launched through the image as SageMaker starts it (tests/training/launch_image.py):
the launcher the toolkit picks, processes per host, hosts, entry point and its arguments, on the first host
of the profile's first instance preference. The arguments must parse with the entry point's own flags."""

from __future__ import annotations

import os
import shlex
from importlib.metadata import version
from pathlib import Path
from unittest import mock

import pytest
from torch.distributed.run import get_args_parser

from tests.training.launch_image import DOCKERFILE, Launch, base_image_env, dockerfile_env, launch
from training_scripts.flags import parse_args
from trainstack.config_loading import load_settings
from trainstack.in_job_restarts import InJobRestartPolicy
from trainstack.instances import instance_type
from trainstack.job_request import launch_hyperparameters
from trainstack.planning.checkpoints import MPIRUN_SIGKILL_TIMEOUT_SECONDS
from trainstack.profiles import Profile, SmpParameters

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIGS = [REPO / "config" / "default.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]
SHIPPED = {
    f"{config.stem}:{profile.name}": profile
    for config in SHIPPED_CONFIGS
    for profile in load_settings(config, environ={}).profiles
}
# The strategies and the NCCL test must each be among the shipped profiles the matrix runs.
REQUIRED = {"smp", "smddp", "torchrun", "nccl_test.sh"}
MPIRUN_STOP_GRACE = ["--mca", "odls_base_sigkill_timeout", str(MPIRUN_SIGKILL_TIMEOUT_SECONDS)]


def test_the_matrix_covers_every_strategy_and_the_nccl_test():
    covered = {profile.strategy for profile in SHIPPED.values()} | {p.entry_point for p in SHIPPED.values()}
    assert covered >= REQUIRED


def test_the_image_sets_the_pytorch_launcher_module_itself_and_no_program():
    environment = dockerfile_env(DOCKERFILE.read_text(), {})
    assert environment["SAGEMAKER_TRAINING_MODULE"] == "sagemaker_pytorch_container.training:main"
    assert "SAGEMAKER_PROGRAM" not in environment


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_profile_launches_its_entry_point_with_its_launcher_on_every_gpu(name, tmp_path, monkeypatch):
    profile = SHIPPED[name]
    result = launch(profile, tmp_path)
    assert result.returncode == 0, result.output
    for variable, value in result.launcher()["env"].items():  # what train.py reads beside its arguments
        if variable.startswith("SM_"):
            monkeypatch.setenv(variable, value)
    preference = profile.instance_preferences[0]
    hosts = [f"algo-{index}" for index in range(1, preference.instance_count + 1)]
    gpus = instance_type(preference.instance_type).gpus
    argv = result.launcher()["argv"]
    if profile.strategy in ("torchrun", "smp"):
        _assert_torchrun(result, hosts, gpus, profile)
    else:
        _assert_mpirun(result, hosts, gpus, profile)
    assert {step["host"] for step in result.steps("dns")} == set(hosts), argv


def _assert_torchrun(result: Launch, hosts: list[str], gpus: int, profile: Profile) -> None:
    record = result.launcher()
    assert record["kind"] == "torchrun"
    nodes = ["--nnodes", str(len(hosts)), "--nproc_per_node", str(gpus)]
    if len(hosts) > 1:
        nodes += ["--master_addr", hosts[0], "--master_port", "7777", "--node_rank", "0"]
    entry = record["argv"][len(nodes)]
    assert record["argv"][: len(nodes)] == nodes and entry == profile.entry_point == "train.py"
    _assert_train_py_arguments(record["argv"][len(nodes) + 1 :], profile)
    # In-job restarts: the toolkit passes no --max-restarts, torchrun's own parser reads it from the job's
    # environment, which the toolkit hands on (trainstack/in_job_restarts.py).
    with mock.patch.dict(os.environ, record["env"], clear=True):
        torchrun = get_args_parser().parse_args(record["argv"])
    assert torchrun.max_restarts == (profile.in_job_restarts or InJobRestartPolicy()).max_restarts > 0


def _assert_mpirun(result: Launch, hosts: list[str], gpus: int, profile: Profile) -> None:
    record = result.launcher()
    argv = record["argv"]
    assert record["kind"] == "mpirun", argv
    assert argv[:4] == ["--host", ",".join(f"{host}:{gpus}" for host in hosts), "-np", str(len(hosts) * gpus)]
    # The ranks' stop grace (trainstack.planning.checkpoints) reaches mpirun as one option.
    assert _contains(argv, MPIRUN_STOP_GRACE), argv
    # The MPI launchers start sshd, wait for every other host's sshd, and tell them mpirun ended.
    assert len(result.steps("sshd")) == 1
    assert [step["host"] for step in result.steps("ssh-probe")] == hosts[1:]
    assert [step["argv"][0] for step in result.steps("ssh")] == hosts[1:]
    assert "PET_MAX_RESTARTS" not in record["env"]  # mpirun cannot restart its ranks
    if profile.strategy == "smddp":
        entry = argv.index("smddprun") + 1
        assert argv[entry + 1 : entry + 4] == ["-m", "mpi4py", profile.entry_point]
        assert "SMDATAPARALLEL_USE_HOMOGENEOUS=1" in argv or len(hosts) == 1
        _assert_train_py_arguments(argv[entry + 4 :], profile)
    else:
        assert "smddprun" not in argv
        shell, script = argv[-3:-1], shlex.split(argv[-1])
        assert shell == ["/bin/sh", "-c"] and script == [f"./{profile.entry_point}"], argv[-3:]


def _assert_train_py_arguments(arguments: list[str], profile: Profile) -> None:
    """What train.py gets: the profile's hyperparameters and --strategy (SMP: --mp_parameters too), no launch
    flag, and its own parser takes them."""
    smp = profile.strategy == "smp"
    names = {argument[2:] for argument in arguments if argument.startswith("--")}
    # A store other than SageMaker's sync tells train.py where its checkpoints are (trainstack.job_request).
    stored = {"sagemaker-sync": [], "fsx": ["checkpoint_dir", "checkpoint_dir_shared"]}.get(
        profile.checkpoint_store, ["checkpoint_dir"]
    )
    assert names == {*profile.hyperparameters, "strategy", *(["mp_parameters"] if smp else []), *stored}
    args = parse_args(arguments)
    assert args.strategy == profile.strategy
    if smp:
        assert args.mp_parameters == launch_hyperparameters(profile)["mp_parameters"]


def test_smp_booleans_reach_train_py_as_booleans(tmp_path, monkeypatch):
    """The toolkit writes a dict hyperparameter as `key=str(value)` pairs ("False", a truthy string) and
    its JSON as SM_HP_MP_PARAMETERS: train.py reads the JSON's types, so `sm_activation_offloading: false`
    is not refused as offloading and tsm.init gets booleans, not strings."""
    smp = SmpParameters(
        hybrid_shard_degree=8,
        sm_activation_offloading=False,
        fsdp_cache_flush_warnings=True,
        allow_empty_shards=True,
    )
    profile = SHIPPED["default:llama-7b-smp"].model_copy(update={"smp": smp})
    result = launch(profile, tmp_path)
    assert result.returncode == 0, result.output
    for variable, value in result.launcher()["env"].items():
        if variable.startswith("SM_"):
            monkeypatch.setenv(variable, value)
    argv = result.launcher()["argv"]
    flag = argv[argv.index("--mp_parameters") + 1]
    assert "sm_activation_offloading=False" in flag, flag  # what the toolkit hands over
    expected = {name: (value, type(value)) for name, value in smp.as_mp_parameters().items()}
    arguments = argv[argv.index("train.py") + 1 :]
    parsed = parse_args(arguments).mp_parameters
    assert {name: (value, type(value)) for name, value in parsed.items()} == expected
    # Without the JSON beside it (a launch by hand), the pairs are read back with the types str() wrote.
    monkeypatch.delenv("SM_HP_MP_PARAMETERS")
    parsed = parse_args(arguments).mp_parameters
    assert {name: (value, type(value)) for name, value in parsed.items()} == expected


def _contains(sequence: list[str], part: list[str]) -> bool:
    return any(sequence[index : index + len(part)] == part for index in range(len(sequence)))


def test_with_the_old_image_environment_the_nccl_test_would_run_train_py(tmp_path):
    """The image before this fix set SAGEMAKER_PROGRAM=train.py, which the toolkit prefers over the job's
    sagemaker_program (sagemaker-training environment.py): every profile ran train.py, the NCCL test too."""
    old = DOCKERFILE.read_text().replace(
        "SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main", "SAGEMAKER_PROGRAM=train.py"
    )
    assert dockerfile_env(old, base_image_env())["SAGEMAKER_PROGRAM"] == "train.py"
    result = launch(SHIPPED["default:nccl-test"], tmp_path, dockerfile_text=old)
    assert result.returncode == 0, result.output
    argv = result.launcher()["argv"]
    assert argv[-3:] == ["-m", "mpi4py", "train.py"], argv[-4:]


def test_the_toolkit_the_image_carries_is_the_one_tested():
    """The launch above depends on these releases' code (runner.py, mpi.py, smdataparallel.py, ...)."""
    pins = (REPO / "requirements-toolkit.txt").read_text()
    for name in ("sagemaker-training", "sagemaker-pytorch-training"):
        assert f"{name}=={version(name)}" in pins
