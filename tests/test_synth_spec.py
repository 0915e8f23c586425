"""What the generator is asked for (``synth/spec.py``): a spec it cannot make is refused."""

from __future__ import annotations

from typing import Any

import pytest

from dircleaner.errors import UsageError
from dircleaner.synth import SynthSpec


@pytest.mark.parametrize(
    "kwargs", [{"dirs": 0}, {"dirs": 10, "empty_fraction": 1.0}, {"dirs": 10, "bucket": ""}]
)
def test_spec_is_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        SynthSpec(**kwargs)
