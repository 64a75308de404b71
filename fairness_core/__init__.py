"""fairness_core: priority classes with exact weighted shares and weighted fair queuing across
tenants, on Redis, atomically, with leases. Nothing here imports the exporter, alerts or CLI."""

from .classification import Classification, classify
from .config import Config, ConfigError, load_config, parse_config, parse_duration
from .config_store import AppliedConfigUnreadable, ConfigConflict, ConfigRefused, Moves
from .connection import RedisDatabaseOutOfRange, redis_client
from .jobs import (
    BudgetRejected, Enqueued, FairnessError, Finished, InvalidJob, Lease, Popped, RedisUnavailable, ReplyLost,
    TenantLimitReached,
)
from .memory import EvictionPolicyError, MemoryInfo, RedisMemoryFull
from .model import Model
from .queue import Queue, QueueApply, QueueGroup, open_queue
from .snapshot import ClassSnapshot, Snapshot

__all__ = [
    "AppliedConfigUnreadable", "BudgetRejected", "Classification", "ClassSnapshot", "Config", "ConfigConflict",
    "ConfigError", "ConfigRefused", "Enqueued", "EvictionPolicyError", "FairnessError", "Finished", "InvalidJob", "Lease",
    "MemoryInfo", "Model", "Moves", "Popped", "Queue", "QueueApply", "QueueGroup", "RedisDatabaseOutOfRange",
    "RedisMemoryFull", "RedisUnavailable", "ReplyLost", "Snapshot", "TenantLimitReached", "classify", "load_config",
    "open_queue", "parse_config", "parse_duration", "redis_client",
]
