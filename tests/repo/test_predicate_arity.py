"""A conditional's arity is read off its code object: the verdict inspect would give."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from runtime.repo._python import predicate_problem

WRONG = "a conditional must take exactly one argument (the surface context `ctx`)"


def _decorated(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return wrapper


CASES: list[Callable[..., Any]] = [
    lambda: True,
    lambda ctx: True,
    lambda ctx, other: True,
    lambda ctx, other=1: True,
    lambda *args: True,
    lambda ctx, *, key: True,
    lambda ctx, *, key=1: True,
    lambda ctx=None: True,
    lambda *, key=1: True,
    lambda ctx, other, *rest: True,
    lambda **kwargs: True,
    lambda ctx, /, other=2: True,
    _decorated(lambda ctx, other: True),  # inspect follows __wrapped__: so must we
    functools.partial(lambda ctx, other: True, other=1),
]


@pytest.mark.parametrize("conditional", CASES)
def test_arity_verdict_is_the_one_inspect_gives(conditional: Callable[..., Any]) -> None:
    try:
        inspect.signature(conditional).bind(None)
        expected = None
    except TypeError:
        expected = WRONG
    assert predicate_problem(conditional) == expected
