"""Where a deploy review gets an app's templates (stack name -> template): a directory of templates (a
cdk.out, or a kept release under tests/upgrades/releases), a config file synthesized by the CDK CLI, or
the stacks deployed in CloudFormation."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from trainstack.deploy_changes import App, strip_build_noise

TEMPLATE_SUFFIXES = (".template.json", ".template.json.gz")


class TemplatesUnavailable(RuntimeError):
    """The templates to compare could not be read: one sentence saying why."""


def read_directory(directory: Path) -> App:
    """Each `<stack>.template.json` (or `.json.gz`) in `directory`, without build noise."""
    app: App = {}
    for path in sorted(directory.iterdir()):
        for suffix in TEMPLATE_SUFFIXES:
            if path.name.endswith(suffix):
                opener = gzip.open if suffix.endswith(".gz") else open
                with opener(path, "rt") as text:
                    app[path.name.removesuffix(suffix)] = strip_build_noise(json.load(text))
    if not app:
        raise TemplatesUnavailable(f"{directory} holds no *.template.json: synthesize the app there first")
    return app


def repository_root() -> Path:
    """The checkout holding app.py and cdk.json: the working directory, else this package's own checkout."""
    for root in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (root / "cdk.json").exists():
            return root
    raise TemplatesUnavailable("no cdk.json here or beside trainstack/: run from the trainstack checkout")


def synthesize(config: Path) -> App:
    """`config`'s app as `make synth` builds it (the CDK CLI, cdk.json's flags), in a scratch cdk.out."""
    root = repository_root()
    local = root / "node_modules" / ".bin" / "cdk"
    cdk = str(local) if local.exists() else "cdk"
    environment = dict(
        os.environ, JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", CDK_DISABLE_VERSION_CHECK="1"
    )
    with tempfile.TemporaryDirectory(prefix="trainstack-review-") as outdir:
        # The review reads templates alone: no copy of an asset (the image's build context, a 50 MB handler).
        command = [cdk, "synth", "--quiet", "--no-notices", "--no-staging", "-o", outdir]
        command += ["-c", f"config={config.resolve()}"]
        done = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise TemplatesUnavailable(f"synthesizing {config} failed: {last}")
        return read_directory(Path(outdir))


# The stacks an app of `project` names (stacks/app_builder.py): network, storage, image, queue, and one
# pipeline, or one per team (`<project>-<team>-pipeline`).
STACK_NAME = r"{project}-(network|storage|image|queue|pipeline|[a-z0-9-]+-pipeline)"


def read_deployed(stack_names: set[str], project: str, region: str) -> App:
    """The templates CloudFormation holds (as deployed: `TemplateStage=Original`) for `stack_names` and for
    every other live stack named as the app of `project` names its stacks (one the app no longer has)."""
    import boto3  # the AWS commands' dependency, imported only here (trainstack/cli.py)
    from botocore.exceptions import BotoCoreError, ClientError

    cloudformation = boto3.client("cloudformation", region_name=region)
    ours = re.compile(STACK_NAME.format(project=re.escape(project)))
    try:
        live = {
            summary["StackName"]
            for page in cloudformation.get_paginator("list_stacks").paginate()
            for summary in page["StackSummaries"]
            if summary["StackStatus"] != "DELETE_COMPLETE"
        }
        app: App = {}
        for stack in sorted(name for name in live if name in stack_names or ours.fullmatch(name)):
            body = cloudformation.get_template(StackName=stack, TemplateStage="Original")["TemplateBody"]
            app[stack] = strip_build_noise(json.loads(body) if isinstance(body, str) else body)
    except (BotoCoreError, ClientError) as error:
        raise TemplatesUnavailable(f"reading the deployed stacks in {region} failed: {error}") from None
    return app
