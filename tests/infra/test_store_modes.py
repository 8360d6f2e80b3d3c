"""Each checkpoint store's app (tests/checkpoint_store_modes.py: every profile on the store) against AWS
Control Tower's proactive controls (cfn-guard, as test_governed.py runs them): with compliance:
control-tower every template passes every rule, and with compliance: none the templates fail exactly the
default mode's known rules: a store changes no resource the controls judge."""

from __future__ import annotations

import pytest

from tests.checkpoint_store_modes import STORE_MODES
from tests.conftest import NO_ENV, default_config_data
from tests.infra.control_tower import failed_rules, unpack_rules
from tests.infra.test_governed import DEFAULT_MODE_FAILURES


@pytest.fixture(scope="module")
def control_tower(tmp_path_factory):
    return unpack_rules(tmp_path_factory.mktemp("control-tower"))


@pytest.mark.parametrize("mode", sorted(STORE_MODES))
def test_each_stores_templates_pass_the_control_tower_rules_of_their_governance_mode(
    mode, control_tower, synthesized_directory
):
    from trainstack.config_loading import parse_settings

    settings = parse_settings(STORE_MODES[mode](default_config_data()), NO_ENV, source=mode)
    outdir = synthesized_directory(settings)  # control-tower: synth runs the rules too
    failures = failed_rules(*control_tower, sorted(outdir.glob("*.template.json")))
    if mode.endswith("-control-tower"):
        assert len(failures) == 4 and all(rules == set() for rules in failures.values()), failures
    else:
        assert failures == DEFAULT_MODE_FAILURES
