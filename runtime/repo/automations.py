"""automations/<name>.json|yaml: work that runs without a person (SPEC 23).

An automation names who runs it (`as`), what it is told (`message`, a template), when
(`trigger`: a cron schedule, a signed webhook, or by hand) and where its reply goes
(`deliver`). Each file is checked on its own: a broken automation is reported with its
`path:line` (and fails `amodal validate`), and it alone is left out of the bundle; the
repo and every other automation still load and run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from runtime.exceptions import DefinitionError
from runtime.repo._checks import MEMO
from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source, did_you_mean, known
from runtime.repo.formats import Strict
from runtime.repo.templates import Template, template_environment

if TYPE_CHECKING:
    from croniter import croniter

# croniter (and the dateutil it brings, ~30 ms) and Jinja2 are imported where they are
# used: a repo without automations, and `amodal validate` on one whose messages passed
# their check before, never load them.

AUTOMATIONS_DIR = "automations"
AUTOMATION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_ENV_SECRET = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
TEMPLATE_NAMES = frozenset({"payload", "automation", "now", "slot", "trigger", "run_id"})
"""What an automation's message template may read (besides Jinja's own helpers)."""

Overlap = Literal["skip", "queue"]
TriggerKind = Literal["cron", "webhook", "manual"]


class CronTriggerFile(Strict):
    cron: str
    timezone: str = "UTC"


class WebhookSecretFile(Strict):
    secret: str


class WebhookTriggerFile(Strict):
    webhook: WebhookSecretFile


class ManualTriggerFile(Strict):
    manual: Literal[True]


class ClaimsFile(Strict):
    claims: dict[str, str]


class WebhookTargetFile(Strict):
    webhook: str = Field(pattern=r"^https?://")
    secret: str | None = None


class StoreTargetFile(Strict):
    store: str
    key: str | None = None


class FailureAlertFile(Strict):
    after: int = Field(ge=1, le=1000)
    webhook: str = Field(pattern=r"^https?://")
    secret: str | None = None
    cooldown_minutes: int = Field(default=60, ge=0, le=10_080)


class AutomationFile(Strict):
    """The shape of one automation file (SPEC 23); `trigger` and `deliver` entries are
    checked against the shape their key names."""

    agent: str | None = None
    message: str = Field(min_length=1)
    trigger: dict[str, Any]
    as_: Literal["operator"] | ClaimsFile = Field(default="operator", alias="as")
    write_enabled: bool = False
    deliver: list[dict[str, Any]] = Field(default_factory=list)
    failure_alert: FailureAlertFile | None = None
    timeout_seconds: int = Field(default=600, ge=1, le=86_400)
    overlap: Overlap = "skip"


_TRIGGERS: dict[str, type[Strict]] = {
    "cron": CronTriggerFile,
    "webhook": WebhookTriggerFile,
    "manual": ManualTriggerFile,
}
_TARGETS: dict[str, type[Strict]] = {"webhook": WebhookTargetFile, "store": StoreTargetFile}


@dataclass(frozen=True, slots=True)
class Target:
    """Where a run's outcome is delivered: a webhook (`url`, signed when `secret`) or a
    store document (`store`, its key from the `key` template or the run id)."""

    kind: Literal["webhook", "store"]
    url: str | None = None
    secret: str | None = field(default=None, repr=False)
    store: str | None = None
    key: Template | None = None

    def describe(self) -> str:
        return f"webhook {self.url}" if self.kind == "webhook" else f"store {self.store}"


@dataclass(frozen=True, slots=True)
class FailureAlert:
    after: int
    url: str
    secret: str | None = field(repr=False)
    cooldown_minutes: int = 60


@dataclass(frozen=True, slots=True)
class AutomationDefinition:
    """One loaded automation."""

    name: str
    file: str
    agent: str | None
    message: Template
    trigger: TriggerKind
    cron: str | None = None
    timezone: str = "UTC"
    webhook_secret: str | None = None
    operator: bool = True
    claims: Mapping[str, str] = field(default_factory=dict)
    write_enabled: bool = False
    deliver: tuple[Target, ...] = ()
    failure_alert: FailureAlert | None = None
    timeout_seconds: int = 600
    overlap: Overlap = "skip"

    def next_slot(self, after: datetime) -> datetime | None:
        """The first cron slot strictly after `after` (None for another trigger)."""
        if self.cron is None:
            return None
        slot: datetime = _cron(self.cron, self.timezone, after).get_next(datetime)
        return slot.astimezone(UTC)

    def previous_slot(self, at: datetime) -> datetime | None:
        """The last cron slot at or before `at` (None for another trigger)."""
        if self.cron is None:
            return None
        from croniter import croniter

        seconds = has_seconds(self.cron)
        local = at.astimezone(ZoneInfo(self.timezone))
        if croniter.match(self.cron, local, second_at_beginning=seconds):
            start = at.replace(microsecond=0) if seconds else at.replace(second=0, microsecond=0)
            return start.astimezone(UTC)
        slot: datetime = _cron(self.cron, self.timezone, at).get_prev(datetime)
        return slot.astimezone(UTC)


def has_seconds(expression: str) -> bool:
    """Whether a cron expression has the optional leading seconds field (six fields)."""
    return len(expression.split()) == 6


def valid_cron(expression: str) -> bool:
    """Five fields (minute hour day-of-month month day-of-week), or six with seconds first."""
    fields = len(expression.split())
    if fields not in (5, 6):
        return False

    def run() -> list[str]:
        from croniter import croniter

        return [] if croniter.is_valid(expression, second_at_beginning=fields == 6) else ["bad"]

    return not MEMO.check("cron", expression, run)


def _cron(expression: str, timezone: str, start: datetime) -> croniter:
    from croniter import croniter

    return croniter(
        expression,
        start.astimezone(ZoneInfo(timezone)),
        second_at_beginning=has_seconds(expression),
    )


@dataclass(frozen=True, slots=True)
class LoadedAutomations:
    automations: Mapping[str, AutomationDefinition]
    errors: tuple[DefinitionError, ...]
    """The problems of the automations left out."""


@dataclass(frozen=True, slots=True)
class Known:
    """What an automation may refer to."""

    agents: frozenset[str]
    stores: frozenset[str]
    has_default: bool


def load_automations(
    reader: Reader, names: Known, environ: Mapping[str, str], offline: bool
) -> LoadedAutomations:
    """Every automation of `automations/`; the broken ones reported and left out."""
    directory = reader.root / AUTOMATIONS_DIR
    loaded: dict[str, AutomationDefinition] = {}
    errors: list[DefinitionError] = []
    if not directory.is_dir():
        return LoadedAutomations({}, ())
    for entry in sorted(directory.iterdir()):
        relative = reader.relative(entry)
        if not entry.is_file() or entry.suffix not in (".json", ".yaml", ".yml"):
            reader.report.warn(relative, "ignored: an automation is automations/<name>.json|yaml")
            continue
        # Each file reports on its own, so its errors leave out only it; the shared reader
        # still records the bytes read (the bundle version covers automations too).
        shared, report = reader.report, Report()
        reader.report = report
        try:
            automation = _load_one(reader, relative, entry.stem, names, environ, offline)
        finally:
            reader.report = shared
        shared.warnings.extend(report.warnings)
        if report.errors or automation is None:
            errors.extend(report.errors)
        elif automation.name in loaded:
            errors.append(_error(relative, f"automation {automation.name!r} is defined twice"))
        else:
            loaded[automation.name] = automation
    return LoadedAutomations(loaded, tuple(errors))


def _error(file: str, message: str) -> DefinitionError:
    return DefinitionError(file, message, None, "")


def _load_one(
    reader: Reader,
    relative: str,
    name: str,
    names: Known,
    environ: Mapping[str, str],
    offline: bool,
) -> AutomationDefinition | None:
    report = reader.report
    if not AUTOMATION_NAME.match(name):
        report.error(
            relative,
            f"automation name {name!r} must be lowercase letters, digits, '_' and '-', "
            "starting with a letter or digit (rename the file)",
        )
        return None
    text = reader.read(relative)
    if text is None:
        return None
    yaml = relative.endswith((".yaml", ".yml"))
    source = Source(relative, text, "yaml" if yaml else "json")
    data = report.parse_yaml(source) if yaml else report.parse_json(source)
    if data is None:
        if yaml:
            report.error(relative, "the file is empty: an automation needs `message` and `trigger`")
        return None
    if not isinstance(data, dict):
        report.error(relative, "an automation is an object", line=source.line())
        return None
    parsed = report.validate(AutomationFile, data, source)
    if parsed is None:
        return None
    checks = _Checks(report, source, environ, offline)
    agent = checks.agent(parsed, names)
    message = checks.template(parsed.message, ("message",))
    trigger = checks.trigger(parsed.trigger)
    targets = tuple(
        target
        for index, entry in enumerate(parsed.deliver)
        if (target := checks.target(entry, index, names)) is not None
    )
    alert = checks.alert(parsed.failure_alert)
    if report.errors or message is None or trigger is None:
        return None
    kind, cron, timezone, secret = trigger
    claims = parsed.as_.claims if isinstance(parsed.as_, ClaimsFile) else {}
    return AutomationDefinition(
        name=name,
        file=relative,
        agent=agent,
        message=message,
        trigger=kind,
        cron=cron,
        timezone=timezone,
        webhook_secret=secret,
        operator=parsed.as_ == "operator",
        claims=dict(claims),
        write_enabled=parsed.write_enabled,
        deliver=targets,
        failure_alert=alert,
        timeout_seconds=parsed.timeout_seconds,
        overlap=parsed.overlap,
    )


class _Checks:
    """The checks of one automation file past its shape, each reporting with its line."""

    def __init__(
        self, report: Report, source: Source, environ: Mapping[str, str], offline: bool
    ) -> None:
        self.report = report
        self.source = source
        self.environ = environ
        self.offline = offline

    def error(self, message: str, path: tuple[str | int, ...]) -> None:
        field = ".".join(str(part) for part in path)
        self.report.error(self.source.path, message, line=self.source.line(path), field=field)

    def agent(self, parsed: AutomationFile, names: Known) -> str | None:
        agent = parsed.agent
        if agent is not None and agent not in names.agents:
            self.error(
                f"unknown agent {agent!r}{did_you_mean(agent, names.agents)}; "
                + known("agents", sorted(names.agents)),
                ("agent",),
            )
        return agent

    def template(self, text: str, path: tuple[str | int, ...]) -> Template | None:
        problems = check_message(text)
        for line, problem in problems:
            where = self.source.line(path)
            self.report.error(
                self.source.path,
                problem,
                line=(where + line - 1) if where is not None else None,
                field=".".join(map(str, path)),
            )
        return None if problems else Template(text, self.source.path, self.source.line(path) or 1)

    def secret(self, value: str | None, path: tuple[str | int, ...]) -> str | None:
        """The secret an `env:NAME` names (the reference itself offline); None when broken."""
        if value is None:
            return None
        match = _ENV_SECRET.match(value)
        if match is None:
            self.error(
                "a secret is written as env:NAME (the variable holding it), never inline",
                path,
            )
            return None
        if self.offline:
            return value
        found = self.environ.get(match.group(1))
        if not found:
            self.error(f"environment variable {match.group(1)!r} is not set (the secret)", path)
            return None
        return found

    def trigger(
        self, data: dict[str, Any]
    ) -> tuple[TriggerKind, str | None, str, str | None] | None:
        kinds = [key for key in _TRIGGERS if key in data]
        if len(kinds) != 1:
            self.error(
                'a trigger is exactly one of {"cron": ...}, {"webhook": {"secret": '
                '"env:NAME"}} or {"manual": true}',
                ("trigger",),
            )
            return None
        kind = kinds[0]
        parsed = self.report.validate(_TRIGGERS[kind], data, self.source, prefix=("trigger",))
        if isinstance(parsed, CronTriggerFile):
            try:
                ZoneInfo(parsed.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                self.error(
                    f"unknown time zone {parsed.timezone!r}: use an IANA name like "
                    "'Europe/Paris' or 'UTC'",
                    ("trigger", "timezone"),
                )
                return None
            if not valid_cron(parsed.cron):
                self.error(
                    f"invalid cron expression {parsed.cron!r}: five fields, minute hour "
                    "day-of-month month day-of-week, e.g. '0 9 * * 1-5', or six with a "
                    "leading seconds field, e.g. '*/30 * * * * *'",
                    ("trigger", "cron"),
                )
                return None
            return "cron", parsed.cron, parsed.timezone, None
        if isinstance(parsed, WebhookTriggerFile):
            secret = self.secret(parsed.webhook.secret, ("trigger", "webhook", "secret"))
            return None if secret is None else ("webhook", None, "UTC", secret)
        if isinstance(parsed, ManualTriggerFile):
            return "manual", None, "UTC", None
        return None

    def target(self, data: dict[str, Any], index: int, names: Known) -> Target | None:
        path: tuple[str | int, ...] = ("deliver", index)
        kinds = [key for key in _TARGETS if key in data]
        if len(kinds) != 1:
            self.error(
                'a delivery target is {"webhook": URL, "secret"?: "env:NAME"} or '
                '{"store": NAME, "key"?: TEMPLATE}',
                path,
            )
            return None
        parsed = self.report.validate(_TARGETS[kinds[0]], data, self.source, prefix=path)
        if isinstance(parsed, WebhookTargetFile):
            secret = self.secret(parsed.secret, (*path, "secret"))
            if parsed.secret is not None and secret is None:
                return None
            return Target("webhook", url=parsed.webhook, secret=secret)
        if isinstance(parsed, StoreTargetFile):
            if parsed.store not in names.stores:
                self.error(
                    f"unknown store {parsed.store!r}{did_you_mean(parsed.store, names.stores)}; "
                    + known("stores", sorted(names.stores)),
                    (*path, "store"),
                )
                return None
            key = self.template(parsed.key, (*path, "key")) if parsed.key is not None else None
            if parsed.key is not None and key is None:
                return None
            return Target("store", store=parsed.store, key=key)
        return None

    def alert(self, parsed: FailureAlertFile | None) -> FailureAlert | None:
        if parsed is None:
            return None
        secret = self.secret(parsed.secret, ("failureAlert", "secret"))
        return FailureAlert(parsed.after, parsed.webhook, secret, parsed.cooldown_minutes)


def check_message(text: str) -> list[tuple[int, str]]:
    """Problems of an automation's message template (it sees `payload`, `automation`,
    `now`, `slot`, `trigger`), as (line within the template, message)."""
    return MEMO.check("automation message", text, lambda: _message_problems(text))


def _message_problems(text: str) -> list[tuple[int, str]]:
    import jinja2
    from jinja2 import nodes

    environment = template_environment()
    try:
        tree = environment.parse(text)
    except jinja2.TemplateSyntaxError as error:
        return [(error.lineno, f"template syntax error: {error.message}")]
    problems: list[tuple[int, str]] = []
    allowed = TEMPLATE_NAMES | {"loop", "self", "caller", "varargs", "kwargs"}
    loaded: set[str] = set()
    assigned: set[str] = set()
    for node in tree.find_all(nodes.Name):
        (loaded if node.ctx == "load" else assigned).add(node.name)
    for name in sorted(loaded - assigned - allowed - set(environment.globals)):
        first = next(n.lineno for n in tree.find_all(nodes.Name) if n.name == name)
        problems.append(
            (
                first,
                f"unknown template variable {name!r}: an automation's message sees "
                + ", ".join(sorted(TEMPLATE_NAMES)),
            )
        )
    for found in tree.find_all((nodes.Getattr, nodes.Getitem)):
        attr = (
            found.attr
            if isinstance(found, nodes.Getattr)
            else getattr(getattr(found, "arg", None), "value", None)
        )
        if isinstance(attr, str) and attr.startswith("_"):
            problems.append((found.lineno, f"templates may not access {attr!r}"))
    return problems


def names_of(agents: Iterable[str], stores: Iterable[str]) -> Known:
    agent_names = frozenset(agents)
    return Known(agent_names, frozenset(stores), "default" in agent_names)
