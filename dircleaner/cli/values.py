"""Option value types that refuse what a typo would otherwise turn into a guard switched off: a
number that is not finite (``nan`` passes every comparison a guard makes), a duration without
its unit (``--min-age 10`` meant minutes as often as seconds). Every float option and every
duration option of every command takes one of these (tests/test_cli_values.py walks them)."""

from __future__ import annotations

import math
from typing import Any

import click

from dircleaner.errors import UsageError
from dircleaner.timeutil import parse_duration, parse_utc_time


def option_name(param: click.Parameter | None) -> str:
    """How the command line spells ``param`` (its long option)."""
    if param is None or not param.opts:
        return "the value"
    return max(param.opts, key=len)


class FiniteFloat(click.FloatRange):
    """A float option (optionally within a range) that refuses ``nan``, ``inf`` and ``-inf``
    in one line (exit 2), before any store is opened."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return super().convert(value, param, ctx)  # click's message for what is no number
        if not math.isfinite(number):
            raise UsageError(
                f"{option_name(param)} {value}: not a finite number; give {self._wanted()}"
            )
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        # The help's range, none when unbounded (click would show "x<=None").
        return super()._describe_range() if (self.min, self.max) != (None, None) else ""

    def _wanted(self) -> str:
        low = "" if self.min is None else f"{self.min:g}"
        high = "" if self.max is None else f"{self.max:g}"
        if low and high:
            return f"one from {low} to {high}"
        if low:
            return f"one of at least {low}"
        return "a finite one"


class Duration(click.types.StringParamType):
    """A duration with its unit (``90s``, ``10m``, ``2h``, ``1d``; a bare ``0`` is zero),
    checked when the option is parsed (one line, exit 2, before any store is opened) and passed
    on as typed, for the summary to show as given."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(super().convert(value, param, ctx)).strip()
        try:
            parse_duration(text)
        except UsageError as exc:
            raise UsageError(f"{option_name(param)}: {exc}") from None
        return text


class UtcTime(click.types.StringParamType):
    """A time as ``parse_utc_time`` reads it, checked when the option is parsed (one line, exit
    2) and passed on as given."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(super().convert(value, param, ctx))
        try:
            parse_utc_time(text)
        except UsageError as exc:
            raise UsageError(f"{option_name(param)}: {exc}") from None
        return text
