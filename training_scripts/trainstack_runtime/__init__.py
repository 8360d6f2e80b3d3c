"""trainstack's runtime library: what a team's PyTorch script calls for the platform's guarantees.

It ships in the training image with the platform's own trainer (train.py is one of its users), so a
run gets the library of the image it runs on. docs/training.md ("The runtime library") documents it.

    import sys
    import trainstack_runtime as ts

    def train(job: ts.Job) -> None:
        model = MyModel().to(job.device)
        optimizer = torch.optim.AdamW(model.parameters())
        checkpoints = ts.Checkpoints(job, model, optimizer)
        metrics = ts.Metrics(job, "my-model")
        job.start_watchdog()
        step = checkpoints.resume()
        while step < job.hyperparameter("max_steps", 100, int):
            loss = ...  # one optimizer step
            step += 1
            job.step_completed(step)
            metrics.log(step, {"train/loss": loss})
            stop = job.stop_reason()  # SIGTERM or a training plan's end, as any rank has it
            if stop or checkpoints.due(step):
                checkpoints.save(step, blocking=bool(stop))
            if stop == ts.STOP_PLAN_ENDING:
                raise job.end_for_plan(step)
            if stop:
                return
        ts.write_evaluation({"accuracy": ...})

    sys.exit(ts.run(train))
"""

import importlib.util as _importlib_util
from pathlib import Path as _Path


def _check_own_modules() -> None:
    """The library's modules are the image's top-level modules beside this package (checkpoint, data,
    faults, ...): a team's module of the same name, earlier on sys.path or imported already, would be
    imported in their place. Refuse to run on someone else's, before importing any."""
    home = _Path(__file__).resolve().parent.parent
    entry_points = {"__init__", "train", "evaluate", "prepare_data"}  # scripts the library never imports
    for name in sorted(path.stem for path in home.glob("*.py") if path.stem not in entry_points):
        spec = _importlib_util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or _Path(origin).resolve().parent != home:
            raise ImportError(
                f"trainstack_runtime needs its own module {name!r} ({home}), but {origin} is found first "
                f"under that name: rename the team's module {name}.py."
            )


_check_own_modules()

from capacity_block import STOP_PLAN_ENDING, STOP_SIGTERM  # noqa: E402  (after the check above)
from data import UserError  # noqa: E402
from trainstack_runtime.checkpoints import Checkpoints  # noqa: E402
from trainstack_runtime.job import Job, run  # noqa: E402
from trainstack_runtime.reporting import Metrics, write_evaluation  # noqa: E402

__all__ = [
    "STOP_PLAN_ENDING",
    "STOP_SIGTERM",
    "Checkpoints",
    "Job",
    "Metrics",
    "UserError",
    "run",
    "write_evaluation",
]
