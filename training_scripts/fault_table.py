"""The one table that says why a training job failed: its class (capacity, infrastructure, user) and kind.

Pure data and the standard library only, so that both sides read the same rows: train.py in the image
(training_scripts/faults.py classifies the exception that ended it) and the pipeline (trainstack/faults.py
classifies the FailureReason in Python and generates the JSONata the attempt machines run). docs/faults.md
lists the rows with their sources; tests/faults/failure_texts.yaml holds the real texts they are tested on.

Each pattern is searched case-insensitively anywhere in the text; the first row that matches wins, so a
specific sign comes before a generic one: a GPU fault inside the toolkit's ExecuteUserScriptError wrapper
is the fleet's, an OOM that made the peers lose their connections is the user's. Patterns use only what
JavaScript and Python regular expressions read alike: literals, `|`, `^`, `\\b`, `.` and `*` (`.` matches
no line break in either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CAPACITY = "capacity"
INFRASTRUCTURE = "infrastructure"
USER = "user"
UNKNOWN = "unknown"
# The token train.py writes first in /opt/ml/output/failure and logs: `trainstack-fault:<class>:<kind>
# <PythonError>: <sentence>` (docs/training.md). It names its own class and kind; kinds may hold hyphens
# (`infrastructure:slow-host`).
TOKEN_PATTERN = "trainstack-fault:(infrastructure|user):([a-z][a-z-]*)"
# The kind of train.py's planned stop before a training plan ends the instances (capacity_block.py): the
# pipeline continues on the next instance preference instead of counting a fault (stacks/pipeline/
# plan_endings.py).
PLAN_ENDING_KIND = "plan-ending"
# The infrastructure kinds after which the same instances can train on, so torchrun restarts the workers
# inside the job (in_job_restart.py; a crash without a reason counts too): a hang, the collectives, the
# network or the store failing. The others need new instances (hardware, slow-host) or end the job on
# purpose (plan-ending).
IN_JOB_RESTARTABLE_KINDS = frozenset({"hang", "collective-timeout", "nccl", "efa", "store", "network"})


@dataclass(frozen=True)
class FaultPattern:
    """One row: texts matching `pattern` are of `fault_class` and `kind`. `in_script`: the row can
    describe an exception the training script raised (train.py applies only those rows; the others match
    what SageMaker or the toolkit write around a failure)."""

    fault_class: str
    kind: str
    pattern: str
    source: str
    in_script: bool = True


FAULT_PATTERNS: tuple[FaultPattern, ...] = (
    FaultPattern(
        CAPACITY,
        "capacity",
        "^CapacityError|Unable to provision requested ML compute capacity|^EC2InsufficientCapacityError",
        "SageMaker's FailureReason when it found no instances: 'CapacityError: Unable to provision requested "
        "ML compute capacity. Please retry using a different ML instance type.' (DESIGN.md Facts; "
        "DIAGNijmegen/rse-grand-challenge#2631), and 'EC2InsufficientCapacityError: Instance type ... is "
        "temporarily unavailable in supported availability zones [...]' (aws/amazon-sagemaker-feedback#99, a "
        "Studio space; assumed to reach training jobs too). The phrase alone also matches the wording inside "
        "other wrappers ('Failure Reason: Unable to provision requested ML compute capacity due to ...')",
        in_script=False,
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "sagemaker-internal",
        "^InternalServerError",
        "SageMaker API reference, RetryStrategy: 'when a training job fails due to an InternalServerError'; "
        "FailureReason 'InternalServerError: We encountered an internal error. Please try again.'",
        in_script=False,
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "hang",
        "ExitCode 75\\b",
        "sagemaker-training 5.1.4 errors.py ('ExecuteUserScriptError:\\nExitCode N') with the watchdog's "
        "exit code 75 (docs/training.md), when its failure file was not written",
        in_script=False,
    ),
    FaultPattern(
        USER,
        "config",
        "ExitCode 2\\b",
        "sagemaker-training 5.1.4 errors.py ('ExitCode N') with train.py's exit code 2 for a user error "
        "(docs/training.md; also argparse's exit code for a bad flag)",
        in_script=False,
    ),
    FaultPattern(
        USER,
        "oom",
        "OutOfMemoryError|CUDA out of memory|OutOfMemory: Process killed|instance type with more memory|"
        "Out of Memory. Please use a larger instance|bad_alloc: out_of_memory",
        "torch's OutOfMemoryError ('CUDA out of memory. Tried to allocate ...'); sagemaker-training 5.1.4 "
        "process.py: exit code 137 is 'OutOfMemory: Process killed by SIGKILL (signal 9)'; SageMaker's "
        "'ClientError: Please use an instance type with more memory, ...' for the host's memory; RMM's "
        "'std::bad_alloc: out_of_memory'. Before the fleet's rows: an OOM on one rank makes its peers report "
        "NCCL and network errors",
    ),
    FaultPattern(
        USER,
        "disk-full",
        "No space left on device|Insufficient disk space|Disk quota exceeded",
        "strerror(ENOSPC) 'No space left on device' and strerror(EDQUOT) 'Disk quota exceeded' (a checkpoint "
        "or the model outgrew the job's volume); SageMaker's 'ClientError: Artifact upload "
        "failed:Insufficient disk space' (VolumeSizeInGB)",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "hardware",
        "uncorrectable ECC error|fallen off the bus|NVRM: Xid|busy or unavailable|hardware failure",
        "CUDA runtime errors cudaErrorECCUncorrectable 'uncorrectable ECC error encountered' and "
        "cudaErrorDevicesUnavailable 'CUDA-capable device(s) is/are busy or unavailable' (on a dedicated "
        "SageMaker host: a wedged GPU); the NVIDIA driver's Xid lines (Xid 79 'GPU has fallen off the bus'); "
        "SageMaker's 'Repairing training cluster due to hardware failure' (Cluster repairs for GPU errors; "
        "the FailureReason after a failed repair is assumed to say 'hardware failure'). Before the NCCL "
        "rows: NCCL's watchdog reports a GPU's ECC error as its own exception",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "efa",
        "NET/OFI|libfabric",
        "aws-ofi-nccl's warnings ('NCCL WARN NET/OFI Request completed with error', 'NET/OFI Unable to "
        "insert remote address into address vector', src/nccl_ofi_rdma.cpp) and libfabric's: the EFA fabric "
        "failed. Before the NCCL usage row: the plugin's 'failed: Invalid argument' is libfabric's errno",
    ),
    FaultPattern(
        USER,
        "nccl-usage",
        "NCCL error.*invalid usage|NCCL error.*invalid argument|ncclInvalidUsage|ncclInvalidArgument",
        "NCCL src/init.cc ncclGetErrorString: ncclInvalidUsage 'invalid usage', ncclInvalidArgument 'invalid "
        "argument' (the program or its NCCL build called NCCL wrongly), as PyTorch reports them ('NCCL error "
        "in: <file>:<line>, invalid usage, NCCL version ...')",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "collective-timeout",
        "Watchdog caught collective operation timeout",
        "PyTorch ProcessGroupNCCL.cpp: '[Rank N] Watchdog caught collective operation timeout: "
        "WorkNCCL(...) ran for N milliseconds before timing out'",
    ),
    FaultPattern(
        USER,
        "port-in-use",
        "Address already in use|EADDRINUSE",
        "c10d socket.cpp: 'The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
        "in use)', later '... port: 29500, ..., name: EADDRINUSE, message: address already in use' "
        "(DistNetworkError): a process of the job's own holds the port. Before the network row",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "nccl",
        "unhandled system error|remote process exited or there was a network error|NCCL error.*internal "
        "error|ncclSystemError|ncclRemoteError|ncclInternalError|unhandled cuda error|NCCL WARN Net "
        ":|Connection closed by remote peer|DistBackendError",
        "NCCL src/init.cc ncclGetErrorString (ncclSystemError 'unhandled system error', ncclRemoteError "
        "'remote process exited or there was a network error', ncclInternalError 'internal error', "
        "ncclUnhandledCudaError 'unhandled cuda error'), as PyTorch reports them (torch.distributed."
        "DistBackendError, 'NCCL error in: <file>:<line>, ...'); NCCL misc/socket.cc ('NCCL WARN Net : Call "
        "to recv from ... failed', 'Connection closed by remote peer')",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "store",
        "DistStoreError|C10d store|waiting for clients|waiting for workers|Socket Timeout|Rendezvous",
        "PyTorch's c10d store and torchrun's rendezvous: torch.distributed.DistStoreError ('Timed out after "
        "N seconds waiting for clients. 1/3 clients joined.', 'wait timeout after ...'), older TCPStore's "
        "'Socket Timeout', RendezvousConnectionError 'The connection to the C10d store has failed' and "
        "RendezvousTimeoutError: a host never joined (SageMaker starts the hosts)",
    ),
    FaultPattern(
        INFRASTRUCTURE,
        "network",
        "DistNetworkError|\\bDistError\\b|Connection reset by peer|Connection closed by peer|gloo/transport|"
        "connect.. timed out",
        "PyTorch torch.distributed.DistNetworkError ('raised when network errors occur') and DistError, "
        "their base; gloo's transport ('[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
        "closed by peer ...'); ECONNRESET's strerror 'Connection reset by peer'; older TCPStore's 'connect() "
        "timed out'",
    ),
    FaultPattern(
        USER,
        "sagemaker-client",
        "^ClientError",
        "SageMaker's FailureReason for a job its own request or account setup broke: 'ClientError: Please "
        "use a GPU instance for training', 'ClientError: Artifact upload failed:Please ensure that the "
        "subnet's route table has a route to an S3 VPC endpoint ...', 'ClientError: Failed to download data. "
        "...' (the role, the KMS key, the VPC or the instance kind: the same request fails again)",
        in_script=False,
    ),
    FaultPattern(
        USER,
        "script",
        "ExecuteUserScriptError|ImportModuleError|InstallRequirementsError|InstallModuleError|"
        "uncaught exception during training",
        "sagemaker-training 5.1.4 errors.py: the entry point, its import or its requirements failed and no "
        "row above saw a sign of the fleet ('AlgorithmError: ExecuteUserScriptError:\\nExitCode N\\n"
        "ErrorMessage \"...\"', aws/amazon-sagemaker-examples#3444); the older containers' 'AlgorithmError: "
        "uncaught exception during training: ...' (aws/amazon-sagemaker-examples#348)",
        in_script=False,
    ),
)

SCRIPT_PATTERNS = tuple(row for row in FAULT_PATTERNS if row.in_script)
_COMPILED = {row: re.compile(row.pattern, re.IGNORECASE) for row in FAULT_PATTERNS}


def first_match(text: str, rows: tuple[FaultPattern, ...] = FAULT_PATTERNS) -> FaultPattern | None:
    """The first of `rows` whose pattern occurs in `text`."""
    return next((row for row in rows if _COMPILED[row].search(text)), None)
