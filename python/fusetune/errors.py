"""The exceptions of fusetune: one class per status code.

The C ABI (``fusetune_status``) and the tuning service (gRPC status codes) report failures
with the same codes (absl's); each becomes one exception class here, so a caller catches
``fusetune.UnavailableError`` whether a server was unreachable or a device was missing.
Every class derives from :class:`FusetuneError` and, where one fits, from the built-in
exception of the same meaning (``InvalidArgumentError`` is a ``ValueError``,
``NotFoundError`` a ``LookupError``, ...).
"""

from __future__ import annotations

__all__ = [
    "FusetuneError", "CancelledError", "UnknownError", "InvalidArgumentError", "DeadlineExceededError",
    "NotFoundError", "AlreadyExistsError", "PermissionDeniedError", "ResourceExhaustedError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
    "UnavailableError", "DataLossError", "UnauthenticatedError", "error_for_code",
]


class FusetuneError(Exception):
    """A failure with a status code.

    Attributes:
        code: the status code's name, e.g. ``"INVALID_ARGUMENT"``.
        message: the text the library or the service gave.
        reason: the service's machine-readable reason (the ``fusetune-error-reason``
            trailing metadata, e.g. ``"WORKER_NOT_REGISTERED"``), or ``""``.
    """

    code = "UNKNOWN"

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.message = message
        self.reason = reason


class CancelledError(FusetuneError):
    code = "CANCELLED"


class UnknownError(FusetuneError):
    code = "UNKNOWN"


class InvalidArgumentError(FusetuneError, ValueError):
    """A bad argument: its message starts with the argument's name."""
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(FusetuneError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(FusetuneError, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(FusetuneError):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(FusetuneError, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(FusetuneError):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(FusetuneError):
    code = "FAILED_PRECONDITION"


class AbortedError(FusetuneError):
    code = "ABORTED"


class OutOfRangeError(FusetuneError):
    code = "OUT_OF_RANGE"


class UnimplementedError(FusetuneError, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(FusetuneError):
    code = "INTERNAL"


class UnavailableError(FusetuneError, ConnectionError):
    code = "UNAVAILABLE"


class DataLossError(FusetuneError):
    code = "DATA_LOSS"


class UnauthenticatedError(FusetuneError):
    code = "UNAUTHENTICATED"


# By the codes' numbers (absl::StatusCode, grpc.StatusCode, fusetune_status share them).
_BY_NUMBER = {
    1: CancelledError, 2: UnknownError, 3: InvalidArgumentError, 4: DeadlineExceededError,
    5: NotFoundError, 6: AlreadyExistsError, 7: PermissionDeniedError, 8: ResourceExhaustedError,
    9: FailedPreconditionError, 10: AbortedError, 11: OutOfRangeError, 12: UnimplementedError,
    13: InternalError, 14: UnavailableError, 15: DataLossError, 16: UnauthenticatedError,
}


def error_for_code(code: int, message: str, reason: str = "") -> FusetuneError:
    """The exception of status code number ``code`` (not 0), carrying ``message``."""
    return _BY_NUMBER.get(code, UnknownError)(message, reason)
