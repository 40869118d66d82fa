"""amodal.json: the repo's own configuration, with `env:NAME` references resolved."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source, format_field
from runtime.repo.formats import FOREIGN_REPO_KEYS, RepoConfig

CONFIG_FILE = "amodal.json"
_ENV_REFERENCE = re.compile(r"^env:(.*)$", re.DOTALL)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


Resolved = dict[tuple[str | int, ...], str]
"""The values that came from `env:` references, by their path in the file: secrets."""


def load_config(
    reader: Reader, environ: Mapping[str, str], offline: bool
) -> tuple[RepoConfig | None, Resolved]:
    """amodal.json, and the values its `env:` references resolved to."""
    report = reader.report
    text = reader.read(CONFIG_FILE)
    if text is None:
        return None, {}
    source = Source(CONFIG_FILE, text)
    data = report.parse_json(source)
    if data is None:
        return None, {}
    if not isinstance(data, dict):
        report.error(
            CONFIG_FILE, "must be a JSON object with at least `name` and `version`", line=1
        )
        return None, {}
    data, resolved = resolve_env(data, source, report, environ, offline)
    for key in FOREIGN_REPO_KEYS:
        if key in data:
            report.warn(
                CONFIG_FILE,
                f"{key!r} is defined by the reference platform and not "
                "implemented by this runtime; it is ignored",
                line=source.line((key,)),
                field=key,
            )
    config = report.validate(RepoConfig, data, source)
    if config is None:
        return None, resolved
    for tier in ("main", "simple", "advanced"):
        binding = getattr(config.models, tier)
        if binding and binding.provider not in (None, "openai") and binding.base_url is None:
            report.warn(
                CONFIG_FILE,
                f"provider {binding.provider!r}: only OpenAI-compatible "
                "endpoints are called; give `baseUrl` of an OpenAI-compatible endpoint",
                line=source.line(("models", tier)),
                field=f"models.{tier}.provider",
            )
    return config, resolved


def resolve_env(
    data: Any, source: Source, report: Report, environ: Mapping[str, str], offline: bool
) -> tuple[Any, Resolved]:
    """`data` with every `env:NAME` string replaced by that variable, and what was replaced.
    A variable that is not set is an error naming the key (`offline`: the form only)."""
    resolved: Resolved = {}

    def resolve(value: Any, path: tuple[str | int, ...]) -> Any:
        if isinstance(value, dict):
            return {key: resolve(item, (*path, key)) for key, item in value.items()}
        if isinstance(value, list):
            return [resolve(item, (*path, index)) for index, item in enumerate(value)]
        match = _ENV_REFERENCE.match(value) if isinstance(value, str) else None
        if match is None:
            return value
        name = match.group(1)
        line, field = source.line(path), format_field(path)
        if not _ENV_NAME.match(name):
            report.error(
                source.path,
                f"{value!r} is not a valid reference: write env:NAME with "
                "a variable name of letters, digits and underscores",
                line=line,
                field=field,
            )
        elif not offline:  # `amodal validate --offline` checks the form only
            if name in environ:
                resolved[path] = environ[name]
                return environ[name]
            report.error(
                source.path,
                f"environment variable {name!r} is not set (referenced as {value!r})",
                line=line,
                field=field,
            )
        return value

    return resolve(data, ()), resolved
