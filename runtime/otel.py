"""OpenTelemetry traces of turns (SPEC 16), extra `otel`: the public path of
`runtime.observe.spans`, where the observer lives.

    async with Runtime.open(repo, observers=[OpenTelemetryObserver(provider)]) as rt: ...
"""

from runtime.observe.spans import TRACE_CONTENT_ENV, OpenTelemetryObserver, exporting_observer

__all__ = ["TRACE_CONTENT_ENV", "OpenTelemetryObserver", "exporting_observer"]
