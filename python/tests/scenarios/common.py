"""What the scenarios share: checks that print what was expected and what came."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterable
from typing import Any


def check(ok: bool, what: str, got: Any = None) -> None:
    """Fails the scenario (exit status 1) with ``what`` and ``got`` unless ``ok``."""
    if not ok:
        print(f"FAILED: {what}" + (f": {got!r:.2000}" if got is not None else ""), file=sys.stderr)
        sys.exit(1)


def check_exactly_once(values: Iterable[int], n: int, what: str) -> None:
    """``values`` are ``range(n)``, each once."""
    got: list[int] = sorted(values)
    twice = sorted(v for v, k in collections.Counter(got).items() if k > 1)
    check(not twice, f"{what}: no value twice", twice[:20])
    missing = sorted(set(range(n)) - set(got))
    check(not missing, f"{what}: every value of range({n})", missing[:20])
    check(len(got) == n, f"{what}: {n} values", got[:20])


def whole(dataset_id: str, stop: int) -> dict:
    """The position of a read that consumed positions ``[0, stop)``."""
    return {
        "dataset_id": dataset_id,
        "repetition": 0,
        "done": [{"start": 0, "stop": stop}],
        "partial": [],
    }
