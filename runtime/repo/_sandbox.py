"""The Jinja2 sandbox every repo template is parsed and rendered in.

A module of its own so that importing the repo's formats does not import Jinja2: a
load whose templates all passed their check before (runtime/repo/_checks.py) and a
process that never renders one never pay for it.
"""

from __future__ import annotations

from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Sandbox(ImmutableSandboxedEnvironment):
    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return not attr.startswith("_") and super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # The stock sandbox renders an unsafe attribute as an empty string; a template
        # that tries this is broken or hostile, and either way must not pass silently.
        raise SecurityError(f"access to attribute {attribute!r} is not allowed in templates")


ENVIRONMENT = _Sandbox(
    trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False
)
