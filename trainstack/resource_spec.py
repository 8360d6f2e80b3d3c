"""Which property changes replace a CloudFormation resource, read from the two sources that say so as data.

- The CloudFormation resource specification that the CDK CLI ships (`node_modules/aws-cdk/db.json.gz`, the
  database of @aws-cdk/service-spec): each property, nested property types included, carries
  `causesReplacement` ("yes", "maybe" = CloudFormation's "Replacement: Conditional", or absent = in place).
- cfn-lint's copies of the CloudFormation registry schemas (`cfnlint/data/schemas`): `createOnlyProperties`
  (and `conditionalCreateOnlyProperties`) as JSON pointers, `*` standing for any array element.

The two disagree on properties that matter here: the specification marks FSx
`LustreConfiguration.DeploymentType` and `PerUnitStorageThroughput` and S3 `ObjectLockEnabled` as
replacing, the registry schemas do not. Nothing here knows which one CloudFormation follows, so a property
that either source marks is a replacement (fail closed) and the verdict says which sources disagree.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

SPEC_FILE = Path("node_modules") / "aws-cdk" / "db.json.gz"
# The registry schemas per region differ in versions only; one region's set is read.
REGISTRY_REGION = "us-east-1"
SPEC_NAME = "the CDK CLI's resource specification"
REGISTRY_NAME = "cfn-lint's registry schema"


class SpecUnavailable(RuntimeError):
    """A source of replacement rules is missing: nothing can be said about a deploy without both."""


@dataclass(frozen=True)
class Verdict:
    """Whether changing one property replaces its resource, and what each source says."""

    spec: str | None  # "yes", "maybe" or None (in place)
    registry: bool  # create-only in the registry schema

    @property
    def replaces(self) -> bool:
        return self.spec is not None or self.registry

    @property
    def note(self) -> str | None:
        """What a finding adds about the sources: where they disagree, or a conditional replacement."""
        if bool(self.spec) != self.registry:
            says_replace, says_update = (
                (SPEC_NAME, REGISTRY_NAME) if self.spec else (REGISTRY_NAME, SPEC_NAME)
            )
            return (
                f"{says_replace} says replacement, {says_update} says update in place: treated as a "
                "replacement"
            )
        if self.spec == "maybe":
            return f"{SPEC_NAME} says the replacement is conditional: treated as a replacement"
        return None


def _repository_root() -> Path:
    return Path(__file__).resolve().parent.parent


def spec_path() -> Path:
    for root in (Path.cwd(), _repository_root()):
        if (root / SPEC_FILE).exists():
            return root / SPEC_FILE
    raise SpecUnavailable(
        f"{SPEC_FILE} is missing: run `npm ci` in the repository (the CDK CLI ships the resource "
        "specification)"
    )


@dataclass(frozen=True)
class _Property:
    causes_replacement: str | None
    type: dict[str, Any]


class ReplacementRules:
    """Replacement verdicts per resource type and property path, ("LustreConfiguration", "DeploymentType")."""

    def __init__(self, spec: dict[str, Any], registry: RegistrySchemas) -> None:
        schema = spec["schema"]
        self._resources = {entity["cloudFormationType"]: entity for entity in schema["resource"]["entities"]}
        self._types = {entity["$id"]: entity for entity in schema["typeDefinition"]["entities"]}
        self._registry = registry

    def knows(self, resource_type: str) -> bool:
        return resource_type in self._resources

    def resource_properties(self, resource_type: str) -> dict[str, _Property]:
        return self._properties(self._resources[resource_type]["properties"])

    def name_properties(self, resource_type: str) -> tuple[str, ...]:
        """Properties that give a resource its physical name: `<Type>Name` (BucketName, TableName) or a
        primary identifier named so (a bucket policy's identifier, Bucket, names another resource)."""
        entity = self._resources.get(resource_type)
        if entity is None:
            return ()
        identifiers = [name for name in entity.get("primaryIdentifier", []) if name.endswith("Name")]
        candidates = [f"{entity['name']}Name", *identifiers]
        return tuple(dict.fromkeys(name for name in candidates if name in entity["properties"]))

    def nested_properties(self, property_type: dict[str, Any]) -> dict[str, _Property] | None:
        """The properties of a property type (a `ref`), or None for a primitive."""
        if property_type.get("type") == "ref":
            return self._properties(self._types[property_type["reference"]["$ref"]]["properties"])
        for member in property_type.get("types", ()):  # a union: its structured member, if any
            if (nested := self.nested_properties(member)) is not None:
                return nested
        return None

    def verdict(self, resource_type: str, path: tuple[str, ...], spec_value: str | None) -> Verdict:
        pointer = tuple("*" if part.isdigit() else part for part in path)
        return Verdict(spec=spec_value, registry=pointer in self._registry.create_only(resource_type))

    @staticmethod
    def _properties(raw: dict[str, Any]) -> dict[str, _Property]:
        return {
            name: _Property(causes_replacement=value.get("causesReplacement"), type=value["type"])
            for name, value in raw.items()
        }


class RegistrySchemas:
    """cfn-lint's registry schemas, each read when a type is first asked about."""

    def __init__(self) -> None:
        # Located, not imported: importing cfnlint loads its whole rule engine (seconds).
        package = find_spec("cfnlint")
        if package is None or not package.submodule_search_locations:
            raise SpecUnavailable(
                "cfn-lint is not installed: `pip install -r requirements-deploy.txt` (its registry schemas "
                "say which properties are create-only)"
            )
        self._schemas = Path(package.submodule_search_locations[0]) / "data" / "schemas"
        self._ids = json.loads((self._schemas / "providers" / f"{REGISTRY_REGION}.json").read_text())
        self._create_only: dict[str, frozenset[tuple[str, ...]]] = {}

    def create_only(self, resource_type: str) -> frozenset[tuple[str, ...]]:
        if resource_type not in self._create_only:
            schema_id = self._ids.get(resource_type)
            schema = (
                json.loads((self._schemas / "resources" / f"{schema_id}.json").read_text())
                if schema_id
                else {}
            )
            pointers = schema.get("createOnlyProperties", []) + schema.get(
                "conditionalCreateOnlyProperties", []
            )
            self._create_only[resource_type] = frozenset(
                tuple(pointer.split("/")[2:]) for pointer in pointers if pointer.startswith("/properties/")
            )
        return self._create_only[resource_type]


@cache
def replacement_rules() -> ReplacementRules:
    """Both sources, read once per process (the specification is 2.7 MB gzipped)."""
    with gzip.open(spec_path()) as packed:
        spec = json.load(packed)
    return ReplacementRules(spec, RegistrySchemas())
