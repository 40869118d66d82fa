"""amodal.json: the repo's own configuration, with `env:NAME` references resolved."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from runtime.models.endpoints import Provider, missing_provider, provider_installed
from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source, format_field
from runtime.repo.formats import FOREIGN_REPO_KEYS, MODEL_ENTRIES, BudgetLimits, RepoConfig
from runtime.repo.model_bindings import configured_models, model_card

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
    check_fallbacks(config, source, report)
    _warn_missing_providers(config, report)
    cost = cost_limit(config.limits)
    if cost is not None:
        for name in unpriced_models(config):
            path = ("limits", cost)
            report.error(
                CONFIG_FILE,
                unpriced_message(name, cost),
                line=source.line(path),
                field=format_field(path),
            )
    return config, resolved


def _warn_missing_providers(config: RepoConfig, report: Report) -> None:
    """A warning, not an error, for a provider the repo names whose package is missing: a
    missing optional part degrades, never blocks (SPEC 9.1). Calls to its models fail
    naming the pip command, and a fallback chain moves on to its next entry."""
    for provider in sorted(named_providers(config)):
        if not provider_installed(provider):
            report.warn(
                CONFIG_FILE,
                f"{missing_provider(provider)}; until it is, every call to a model of "
                f"provider {provider!r} fails (a fallback chain moves on to its next entry)",
                field="models",
            )


def named_providers(config: RepoConfig) -> set[Provider]:
    """Every provider `models` names, fallbacks included."""
    named: set[Provider] = set()
    for binding in (config.models.main, config.models.simple, config.models.advanced):
        if binding is None:
            continue
        for provider in (binding.provider, *(entry.provider for entry in binding.fallback)):
            if provider is not None:
                named.add(cast(Provider, provider))  # validated by formats.py
    return named


def cost_limit(limits: BudgetLimits | None) -> str | None:
    """The first limit in dollars that `limits` sets (its camelCase name), or None."""
    if limits is None:
        return None
    for key in ("max_turn_cost_usd", "max_session_cost_usd", "max_daily_cost_usd_per_owner"):
        if getattr(limits, key) is not None:
            return BudgetLimits.model_fields[key].alias or key
    return None


def unpriced_message(model: str, limit: str) -> str:
    return (
        f"{limit} is a cost limit but model {model!r} has no known price: give its entry "
        'in `models` a `"price": {"input": USD, "output": USD}` per million tokens'
    )


def unpriced_models(config: RepoConfig) -> list[str]:
    """The models `models` names (tiers and fallbacks) with no price in the repo or the
    catalog: a cost limit cannot be kept on them (SPEC 22)."""
    return [name for name in configured_models(config) if model_card(config, name).price is None]


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


def check_fallbacks(config: RepoConfig, source: Source, report: Report) -> None:
    """Every `{"tier": NAME}` of a `fallback` list names an entry of `models` (`main`, the
    session model, always exists), and no chain of them comes back to where it started."""
    models = config.models
    defined = {name for name in MODEL_ENTRIES if getattr(models, name) is not None}
    edges: dict[str, list[tuple[int, str]]] = {}
    for name in MODEL_ENTRIES:
        binding = getattr(models, name)
        for index, entry in enumerate(binding.fallback if binding is not None else ()):
            if entry.tier is None:
                continue
            path = ("models", name, "fallback", index)
            if entry.tier != "main" and entry.tier not in defined:
                shown = ", ".join(repr(tier) for tier in sorted(defined | {"main"}))
                report.error(
                    CONFIG_FILE,
                    f"fallback names tier {entry.tier!r}, which `models` does not define "
                    f"(defined: {shown})",
                    line=source.line((*path, "tier")),
                    field=format_field(path),
                )
            else:
                edges.setdefault(name, []).append((index, entry.tier))
    reported: set[frozenset[str]] = set()  # one error per cycle, at its first entry
    for name in MODEL_ENTRIES:
        for index, target in edges.get(name, ()):
            loop = _path_back(target, name, edges)
            if loop is not None and frozenset(loop) not in reported:
                reported.add(frozenset(loop))
                path = ("models", name, "fallback", index)
                report.error(
                    CONFIG_FILE,
                    "the fallback chain comes back to where it started: "
                    + " -> ".join([name, *loop]),
                    line=source.line((*path, "tier")),
                    field=format_field(path),
                )


def _path_back(
    start: str, goal: str, edges: Mapping[str, list[tuple[int, str]]]
) -> list[str] | None:
    """The tiers from `start` back to `goal` along fallback references, or None."""
    pending, seen = [(start, [start])], set()
    while pending:
        tier, path = pending.pop()
        if tier == goal:
            return path
        if tier in seen:
            continue
        seen.add(tier)
        pending.extend((target, [*path, target]) for _, target in edges.get(tier, ()))
    return None
