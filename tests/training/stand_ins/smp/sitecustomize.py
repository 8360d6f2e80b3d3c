"""Test-only: makes tests/training/stand_ins/smp/torch_sagemaker importable as `torch.sagemaker`.

A directory on PYTHONPATH cannot add a module to the installed `torch` package, so this file (which
Python's `site` imports at start-up from the first `sitecustomize` on the path) puts a finder first on
sys.meta_path that serves `torch.sagemaker` and its submodules from the stand-in's files. Only processes
started with this directory on PYTHONPATH see it; torch itself is not imported here.
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_PACKAGE = Path(__file__).parent / "torch_sagemaker"
_NAME = "torch.sagemaker"


class _StandInFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == _NAME:
            return importlib.util.spec_from_file_location(
                fullname, _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
            )
        if fullname.startswith(_NAME + "."):
            file = _PACKAGE.joinpath(*fullname.split(".")[2:]).with_suffix(".py")
            return importlib.util.spec_from_file_location(fullname, file) if file.is_file() else None
        return None


sys.meta_path.insert(0, _StandInFinder())
