"""Errors dircleaner raises on purpose; the CLI maps each to a one-line message and an exit code."""


class DircleanerError(Exception):
    """Base class of every error dircleaner raises on purpose."""

    exit_code: int = 1

    def __init__(self, *args: object, details: dict[str, object] | None = None) -> None:
        super().__init__(*args)
        #: what is known when it was raised (counts, generation), for ``--json``
        self.details: dict[str, object] = dict(details or {})


class UsageError(DircleanerError):
    """An argument or input value is malformed."""

    exit_code = 2


class StoreUrlError(UsageError):
    """The store URL is malformed or names an unknown scheme."""


class StoreNotFound(DircleanerError):
    """The store does not exist (a command that reads never creates one)."""


class StoreReadOnly(DircleanerError):
    """A command that writes was pointed at a store this process can only read."""


class StoreNotOurs(UsageError):
    """The SQLite file holds tables of its own: ours are added to it only when asked."""


class StoreUnavailable(DircleanerError):
    """The store could not be reached after bounded retries."""


class SchemaError(DircleanerError):
    """A keyspace, table or column the mapping names does not exist."""


class TransientStoreError(DircleanerError):
    """A timeout or overload that is worth retrying with backoff."""


class FilterCorrupt(DircleanerError):
    """The stored filter failed its checksum or header check."""

    exit_code = 3


class FilterMismatch(DircleanerError):
    """Two filters (or a filter and a job) disagree on parameters or scope."""

    exit_code = 3


class FilterNotFound(DircleanerError):
    """No complete filter generation exists for this scope."""


class GuardRefused(DircleanerError):
    """A safety guard refused to delete; nothing was deleted."""

    exit_code = 3


class FilterStale(GuardRefused):
    """The stored filter is older than --max-filter-age."""


class FilterIncomplete(GuardRefused):
    """The filter generation lacks shards or its completion marker."""


class FilterTooFull(GuardRefused):
    """The filter's effective false-positive rate is far above its target."""


class FilterSuspiciouslyEmpty(GuardRefused):
    """The filter holds no directory while the folder index is not empty."""


class TooManyCandidates(GuardRefused):
    """Candidates exceed --max-delete-fraction of the swept directories."""


class BucketNotFound(GuardRefused):
    """--bucket names a bucket the store holds nothing of (a typo?); nothing was deleted."""


class LeaseHeld(DircleanerError):
    """Another run holds the store's lease; nothing was deleted."""

    exit_code = 3


class LeaseLost(DircleanerError):
    """This run no longer holds the store's lease; it stopped deleting."""

    exit_code = 3


class RewriteUnsupported(DircleanerError):
    """The folders table has a column a partition rewrite cannot copy faithfully."""

    exit_code = 3


class SpillFailed(DircleanerError):
    """A slice's candidates (or its plan) could not be written to or read back from its spill
    file: nothing of that slice was deleted."""
