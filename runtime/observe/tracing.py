"""Whether a process traces: the standard `OTEL_*` variables decide (SPEC 16). Importing
this loads no OpenTelemetry: the `otel` extra is needed only when they ask for traces."""

from __future__ import annotations

from collections.abc import Mapping

from runtime.exceptions import ConfigurationError
from runtime.observe.hooks import RunObserver


def tracing_from_environment(environ: Mapping[str, str]) -> list[RunObserver]:
    """The OpenTelemetry observer when the standard `OTEL_*` variables name an exporter
    (`OTEL_TRACES_EXPORTER` = `otlp` or `console`, or an `OTEL_EXPORTER_OTLP_ENDPOINT` /
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); none otherwise, and none for
    `OTEL_TRACES_EXPORTER=none`. `ConfigurationError` when the `otel` extra is missing."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter == "none" or not (exporter or endpoint):
        return []
    try:
        from runtime.observe.spans import exporting_observer
    except ImportError as error:
        raise ConfigurationError(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
            "pip install 'amodal-runtime[otel]' (or unset them)"
        ) from error
    return [exporting_observer(environ)]
