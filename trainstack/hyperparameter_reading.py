"""How train.py reads a hyperparameter of the job, for the input rules that read one before the job
(trainstack.input_rules; their JSONata twins in stacks/pipeline/pipeline_input_rules.py).

Values: train.py does not get the text as written. SageMaker's training toolkit JSON-decodes each value
(sagemaker-training 5.1.4 environment.py read_hyperparameters: json.loads, else the text itself), writes it
back with str() (mapping.py to_cmd_args) and train.py's int() reads that (training_scripts/flags.py). So
" 99999999", "99999999 ", "+99999999", "0099999999", "99_999_999" and '"99999999"' all train 99999999
steps, and "9.9999999e7" reaches train.py as "99999999.0", which it refuses. Plain digits alone read the
same in the toolkit, train.py, Python and JSONata: a counted hyperparameter takes nothing else.

Names: the toolkit passes a hyperparameter as the flag `--<name>` (mapping.py to_cmd_args), train.py reads
`_` in a flag as `-` (flags.py parse_args) and argparse anything after `=` as the flag's value. So
max-steps and max_steps=99999999 reach train.py as max_steps, past every rule that reads max_steps: a
checked name is taken only as spelled here.
"""

from __future__ import annotations

import re

from trainstack.cost_cap import MAX_STEPS
from trainstack.launch_flags import RESERVED_HYPERPARAMETERS
from trainstack.planning.forecast import INTERVAL_HYPERPARAMETER
from trainstack.planning.setups import STEP_SHAPE

# The hyperparameters the product reads as whole numbers before the job, with what each counts: the cost
# cap's max_steps, the checkpoint interval and the step's shape (`trainstack start`'s plan lines).
COUNTED_HYPERPARAMETERS = {MAX_STEPS: "steps", INTERVAL_HYPERPARAMETER: "steps", **STEP_SHAPE}
# 1 to 999999999 (9 digits: exact as a JSONata number too), matched as a whole text, never with `^...$`:
# Python's `$` also matches before a trailing newline, JavaScript's (the state machines' JSONata) does not.
COUNT_PATTERN = r"[1-9][0-9]{0,8}"
MAX_COUNT = 999_999_999
# The names the input rules read: the reserved launch flags and the counted hyperparameters.
CHECKED_NAMES = (*RESERVED_HYPERPARAMETERS, *COUNTED_HYPERPARAMETERS)


def is_count(text: str) -> bool:
    """Plain digits from 1 to MAX_COUNT: the text train.py reads as the number it spells."""
    return re.fullmatch(COUNT_PATTERN, text) is not None


def train_py_flag(name: str) -> str:
    """The flag train.py reads a hyperparameter named `name` as, without its leading dashes."""
    return name.partition("=")[0].replace("_", "-")


CHECKED_FLAGS = tuple(train_py_flag(name) for name in CHECKED_NAMES)


def is_spelled_as_checked(name: str) -> bool:
    """False for a name train.py reads as a checked name that it is not (max-steps, max_steps=N)."""
    return name in CHECKED_NAMES or train_py_flag(name) not in CHECKED_FLAGS
