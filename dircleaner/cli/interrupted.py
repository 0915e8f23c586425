"""The one line of a command stopped by SIGINT or SIGTERM: how far it got, in its own words."""

from __future__ import annotations

import signal

from dircleaner.cli.progress_display import Reached
from dircleaner.workers.interrupt import Interrupted

#: what each phase counts, as its progress reports it
_COUNTED = {
    "build": "object partitions scanned",
    "sweep": "directories swept",
    "verify": "candidates re-checked",
    "walk": "directories walked",
    "clean": "deletes",
    "generate": "directories generated",
    "put": "keys imported",
    "deleted": "keys deleted",
    "read": "audit log entries read",
    "sort": "audit log entries sorted",
    "restore": "entries restored",
}
#: the phases of a run or clean that come before its first delete
_BEFORE_DELETING = frozenset({"build", "sweep", "verify", "walk"})
_DELETING_COMMANDS = frozenset({"run", "clean"})


def interrupted_line(command: str | None, exc: Interrupted, reached: Reached | None) -> str:
    """``interrupted by SIGINT: stopped after 4,210 of 15,977 deletes; what was deleted is in
    the audit log and the next run resumes`` (without the ``Error:`` click adds)."""
    name = signal.Signals(exc.signum).name
    if exc.at_once:
        head = f"interrupted by a second {name}: stopped at once"
    elif reached is None:
        head = f"interrupted by {name}: stopped before its first batch"
    else:
        phase, done, total = reached
        counted = _COUNTED.get(phase, f"{phase} items")
        of = f" of {total:,}" if total else ""
        head = f"interrupted by {name}: stopped after {done:,}{of} {counted}"
    return f"{head}; {_what_now(command, exc, reached)}"


def _what_now(command: str | None, exc: Interrupted, reached: Reached | None) -> str:
    phase = None if reached is None else reached[0]
    if command in _DELETING_COMMANDS:
        if (phase is None or phase in _BEFORE_DELETING) and not exc.at_once:
            return "nothing was deleted yet; the next run resumes"
        return "what was deleted is in the audit log and the next run resumes"
    if command == "import-keys":
        return "import the file again to finish (a key imported twice is stored once)"
    if command == "delete-keys":
        return "run it again to finish (deleting a key twice changes nothing)"
    if command == "gen":
        if exc.at_once:
            return "the store may hold part of the dataset: generate it into a new store"
        return "nothing was loaded into the store yet: run gen again"
    if command == "build":
        return "nothing was deleted and the unfinished filter is never used; build again"
    if command == "restore":
        return "restore again to finish (an entry restored twice is stored once)"
    return "nothing was changed"
