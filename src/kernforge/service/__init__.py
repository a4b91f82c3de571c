"""The replay service: persistent Dask workers (one per GPU or CPU core group) that hold
recordings and compiled modules, evaluate / validate / tune variants, and survive candidates
that crash or hang. See docs/service.md."""

from .client import Client, Metrics, Pending, ServiceError
from .config import ServiceConfig
from .tasks import Limits

__all__ = ["Client", "Limits", "Metrics", "Pending", "ServiceConfig", "ServiceError"]
