# Every target installs what it needs (idempotently) into .venv and node_modules/.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
CONFIG ?= config/default.yaml
CDK := node_modules/.bin/cdk
SYNTH_DEPS := $(VENV)/.synth-deps
DEV_DEPS := $(VENV)/.dev-deps
# The training tests run on the image's own library versions (torch 2.5.1, transformers 4.44.2: container/)
# in a venv of their own; the rest of the suite on .venv's newer stack (docs/training.md says which runs where).
IMAGE_VENV := .venv-image
IMAGE_DEPS := $(IMAGE_VENV)/.image-deps
CHECKOV_VENV := .venv-checkov
CHECKOV := $(CURDIR)/$(CHECKOV_VENV)/bin/checkov

# aws-cdk-lib still runs on node 20 but prints an end-of-life banner; the CLI must not call home.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
# pip compiles none of the ~33,000 modules it installs (most are never imported); each module compiles once,
# on first import, and every later process reads that: even where the environment says not to write
# bytecode, as python Docker images do (else each of a test run's ~250 Python processes recompiles what it
# imports of this project).
PIP_INSTALL := pip install -q --no-compile
unexport PYTHONDONTWRITEBYTECODE

.PHONY: synth demo demo-fault demo-queue demo-trigger diff deploy test lint local-train clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP_INSTALL) --upgrade pip

# Synthesis needs only the CDK libraries and the config model: no torch.
$(SYNTH_DEPS): requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/$(PIP_INSTALL) -r requirements.txt
	$(BIN)/$(PIP_INSTALL) --no-deps -e .
	touch $@

$(DEV_DEPS): $(SYNTH_DEPS) requirements-dev.txt requirements-train.txt requirements-test.txt requirements-toolkit.txt
	$(BIN)/$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# torch 2.5.1 from PyPI is a CUDA build: about 5 GB installed, although the tests run on the CPU.
$(IMAGE_DEPS): requirements-image.txt container/base-image-versions.txt container/requirements.txt \
		requirements.txt requirements-test.txt requirements-toolkit.txt
	$(PYTHON) -m venv $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/$(PIP_INSTALL) --upgrade pip
	$(IMAGE_VENV)/bin/$(PIP_INSTALL) -r requirements-image.txt
	touch $@

$(CDK): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# app.py validates the config (one line on error, as `trainstack check-config`), prints the FSx plan and
# its monthly cost, and removes templates of stacks the app no longer has from cdk.out.
synth: $(SYNTH_DEPS) $(CDK)
	cdk synth --quiet --no-notices -c config=$(CONFIG)

# One retraining end to end with no AWS: the synthesized state machine in the local emulator, SageMaker
# simulated by local training processes, a capacity loss, back-off and resume (localaws/demo/run.py).
# With teams, TEAM= names the team whose pipeline runs it; PROFILE= one of its profiles (default: the first
# torchrun one). A config, team or profile the demo cannot run ends in one sentence (exit code 2).
demo: $(DEV_DEPS) synth
	python -m localaws.demo --config $(CONFIG) $(if $(TEAM),--team $(TEAM)) $(if $(PROFILE),--profile $(PROFILE)) \
		$(if $(CODE),--code $(CODE)) $(if $(ENTRY),--entry $(ENTRY))

# The fault variant: attempt 1 hangs on purpose after its first checkpoint, train.py's watchdog ends it,
# the pipeline classifies the infrastructure fault and attempt 2 resumes (localaws/demo/run.py --fault hang).
demo-fault: $(DEV_DEPS) synth
	python -m localaws.demo --config $(CONFIG) --fault hang --workdir demo-fault-run

# Queue mode with no AWS: two teams' retrainings through an emulated AWS Batch queue of 2 instances; the
# output shows the order fair share chose (localaws/demo/queue_run.py; it synthesizes in queue mode).
demo-queue: $(DEV_DEPS) $(CDK)
	python -m localaws.demo.queue_run --config $(CONFIG)

# Retrain on new data with no AWS: the app synthesized with retrain_on_new_data on, its trigger machine in the
# emulator on a stepped clock; 20 uploads -> one run, new files during it -> one more, the same files -> none
# (localaws/demo/trigger_run.py; docs/trigger.md).
demo-trigger: $(DEV_DEPS) $(CDK)
	python -m localaws.demo.trigger_run --config $(CONFIG)

# The deploy review (docs/upgrading.md) reads the CloudFormation specification the CDK CLI ships and
# cfn-lint's registry schemas.
DEPLOY_DEPS := $(VENV)/.deploy-deps
$(DEPLOY_DEPS): $(SYNTH_DEPS) requirements-deploy.txt
	$(BIN)/$(PIP_INSTALL) -r requirements-deploy.txt
	touch $@

# Review a deploy first: what it would replace, delete or fail on against the deployed stacks, then `cdk diff`.
diff: synth $(DEPLOY_DEPS)
	-trainstack check-config $(CONFIG) --templates cdk.out --against-deployed --allow "$(ALLOW_REPLACE)"
	cdk diff --all --no-notices -c config=$(CONFIG)

# Needs AWS credentials (and Docker, to build the image); `cdk bootstrap` once per account/region first.
# Refuses a deploy that would replace or delete a stateful resource, or fail on a name or path conflict,
# unless each finding is named: make deploy ALLOW_REPLACE=FileSystem,DatasetBucket (docs/upgrading.md).
deploy: synth $(DEPLOY_DEPS)
	trainstack check-config $(CONFIG) --templates cdk.out --against-deployed --allow "$(ALLOW_REPLACE)"
	cdk deploy --all --no-notices -c config=$(CONFIG)

# The run report's browser test (tests/demo/test_demo.py) loads the page in Debian's Chromium. Where
# apt-get cannot install it (not root, not Debian) that test fails and says so; it never skips.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
	  || echo "make: could not install Debian's chromium (apt-get, as root): the report's browser test will fail" >&2

# Each test runs where its marker says (tests/conftest.py): newer_stack in .venv, image_stack in .venv-image.
# .venv-image (torch 2.5.1, ~5 GB) installs while the newer-stack suite runs, and its suite starts as soon as
# it is installed, beside the newer one: a worker waits on its training processes, and several workers fill
# two cores where two left gaps (and hold their share of a machine that runs something else beside them).
# The install goes first for the CPU (nice -5; where the user may not raise a priority, nice says so in the
# install log and it runs at the usual one): the image suite waits on it, and among the newer suite's
# processes pip got a quarter of a core (a loaded machine, 2026-12-06: 294 s for about 70 CPU-s), which made
# the image suite the last to finish. Chromium installs beside it, not before it. The newer suite has three workers, the image suite two:
# the newer one holds about 60 % of the CPU, and with two workers each it ran alone for its last 6 minutes
# (loaded machine, 2026-12-06: 1,192 s against 763 s). Its output follows the newer suite's. Both suites
# always run; the target fails if either does. Each worker takes a whole file (module fixtures run once),
# the longest files first, in tests/conftest.py's order (LONGEST_FILES), not xdist's (most tests first).
IMAGE_INSTALL_LOG := $(IMAGE_VENV).install.log
IMAGE_TEST_LOG := $(IMAGE_VENV).test.log
XDIST := --dist loadfile --no-loadscope-reorder --durations=15
test: $(DEV_DEPS) $(CDK)
	@rm -f $(IMAGE_TEST_LOG); \
	{ if ! nice -n -5 $(MAKE) --no-print-directory $(IMAGE_DEPS) > $(IMAGE_INSTALL_LOG) 2>&1; then \
	    cat $(IMAGE_INSTALL_LOG); echo "make: installing $(IMAGE_VENV) failed (its log is above)" >&2; exit 1; fi; \
	  $(IMAGE_VENV)/bin/python -m pytest -n 2 $(XDIST) -m image_stack tests/training > $(IMAGE_TEST_LOG) 2>&1; } & \
	image_suite=$$!; \
	$(MAKE) --no-print-directory -s $(CHROMIUM); \
	pytest -n 3 $(XDIST) -m newer_stack; newer=$$?; \
	wait $$image_suite; image=$$?; \
	if [ -f $(IMAGE_TEST_LOG) ]; then echo "make: the image suite ($(IMAGE_TEST_LOG)), run beside it:"; cat $(IMAGE_TEST_LOG); fi; \
	exit $$(( newer || image ))

lint: $(DEV_DEPS) $(CDK) $(CHECKOV) synth
	ruff check .
	hadolint container/Dockerfile
	python container/dockerfile_policy.py container/Dockerfile --requirements container/requirements.txt
	cfn-lint cdk.out/*.template.json
	$(CHECKOV) --directory cdk.out --framework cloudformation --quiet --compact --skip-download

$(CHECKOV): requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/$(PIP_INSTALL) -r requirements-checkov.txt
	touch $@

local-train: $(DEV_DEPS)
	bash training_scripts/local_train.sh

# Needs AWS credentials. Deletes the config's stacks (pipelines, queue, image, storage, network), lists what
# CloudFormation retains and what it keeps costing; deletes or exports a retained resource only when named:
# make teardown CONFIG=... TEARDOWN_ARGS="--export fs-... --delete-retained fs-..." (docs/teardown.md).
.PHONY: teardown
teardown: $(SYNTH_DEPS)
	python -m trainstack.teardown --config $(CONFIG) $(TEARDOWN_ARGS)

clean:
	rm -rf cdk.out local-run demo-run demo-fault-run demo-queue-run demo-trigger-run .pytest_cache .hypothesis
