"""fusetune: tuned fused-attention kernels from Python.

* :func:`attention`, :func:`attention_with_kvcache`: the kernels on torch tensors (CPU, CUDA)
  and numpy arrays, in FlashAttention's conventions, with the tuned config by default.
* :class:`ConfigCache`: the best config per problem and device class, never waiting on the
  network (memory, then a snapshot file, then the backend's default), refreshed from a server.
* :class:`Client`: the tuning service over gRPC.
* :func:`open_db`: a fusetune database, read-only.
* :class:`Problem`, :class:`Config`: the C++ ``AttentionProblem`` and ``KernelConfig``.

Everything runs through the C ABI library installed beside this package
(``libfusetune_capi.so``) and, for the service, gRPC; see python/README.md.
"""

from ._build import __version__
from .kernels import attention, attention_with_kvcache, device_class
from .config_cache import (CachedConfig, ConfigCache, ConfigCacheStats, default_config_cache,
                           set_default_config_cache)
from .db import Database, open_db
from .errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError, DeadlineExceededError,
                     FailedPreconditionError, FusetuneError, InternalError, InvalidArgumentError, NotFoundError,
                     OutOfRangeError, PermissionDeniedError, ResourceExhaustedError, UnauthenticatedError,
                     UnavailableError, UnimplementedError, UnknownError)
from .problem import Config, Problem, seed_problems, tolerance
from .records import Audit, BestConfig, BestConfigAnswer, Job, Regression, SampleBlock, Trial

__all__ = [
    "__version__", "attention", "attention_with_kvcache", "device_class", "CachedConfig", "ConfigCache",
    "ConfigCacheStats", "default_config_cache", "set_default_config_cache", "Client", "Database", "open_db",
    "Config", "Problem", "seed_problems", "tolerance", "Audit", "BestConfig", "BestConfigAnswer", "Job",
    "Regression", "SampleBlock", "Trial",
    "FusetuneError", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError", "DeadlineExceededError",
    "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError", "OutOfRangeError",
    "PermissionDeniedError", "ResourceExhaustedError", "UnauthenticatedError", "UnavailableError",
    "UnimplementedError", "UnknownError",
]


def __getattr__(name):
    # The client loads gRPC and the generated stubs: only when it is asked for.
    if name == "Client":
        from .client import Client
        return Client
    raise AttributeError(f"module 'fusetune' has no attribute {name!r}")
