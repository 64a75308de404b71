"""What every command shares: the ``--config``/``--redis-url`` options, opening the queue from
them, and turning expected failures into one clear line on stderr with exit code 2.

Failures the user can fix (a bad argument, a bad config, Redis down) are not bugs, so they never
show a traceback; each message starts with the argument to fix: for Redis, where its URL came
from (``--redis-url``, ``FAIRCTL_REDIS_URL`` or the config file's ``redis.url``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource
from click.exceptions import Exit

from exporter.metrics import group_of
from exporter.sources import watched
from fairness_core import (
    AppliedConfigUnreadable,
    BudgetRejected,
    Config,
    ConfigError,
    EvictionPolicyError,
    InvalidJob,
    RedisMemoryFull,
    Queue,
    RedisUnavailable,
    TenantLimitReached,
    load_config,
    open_queue,
    redis_client,
)
from fairness_core.config import EXAMPLE_CONFIG, POLICIES
from fairness_core.redis_url import check_url, is_cluster
from fairness_core.queue import group_configs, shard_config

from .commands import BAD_ARGUMENT

DEFAULT_CONFIG = Path("fairness.yaml")
URL_VARIABLE = "FAIRCTL_REDIS_URL"
_CONFIG_URLS = "fairctl.config_urls"  # click's ctx.meta: the config files whose redis.url a command uses
PATH = click.Path(path_type=Path)  # a file or directory argument, as a pathlib.Path

# The options most commands share, each a decorator (``@config_option``) that adds it.
config_option = click.option(
    "--config", type=PATH, default=DEFAULT_CONFIG, envvar="FAIRCTL_CONFIG", show_envvar=True, show_default=True,
    help="fairness.yaml to read: classes, weights, tenants, classification rules, leases. Without it and "
         "with no fairness.yaml here, the example config shipped with fairctl.",
)
configs_option = click.option(
    "--config", "configs", type=PATH, multiple=True, envvar="FAIRCTL_CONFIG", show_envvar=True, metavar="FILE",
    show_default=False,
    help="fairness.yaml of a queue group (default: fairness.yaml here, else the example config shipped with "
         "fairctl). Repeat it for several groups, each labelled with its redis.prefix (FAIRCTL_CONFIG: the files "
         "separated by colons).",
)
redis_url_option = click.option(
    "--redis-url", envvar=URL_VARIABLE, show_envvar=True, show_default=False,
    help="Redis to use instead of the config's redis.url (redis://, rediss://, unix://, "
         "redis+cluster:// or rediss+cluster://; user:password@ for ACLs).",
)


def fail(argument: str, message: str, code: int = BAD_ARGUMENT) -> NoReturn:
    click.echo(f"fairctl: error: {argument}: {message}", err=True)
    raise Exit(code)


@contextmanager
def clear_errors(**argument_for_field: str) -> Iterator[None]:
    """Map the core's errors to the CLI argument that caused them; ``argument_for_field`` renames
    :class:`InvalidJob` fields (``task="TASK"``), others become ``--<field>``."""
    try:
        yield
    except ConfigError as exc:
        fail("--config", str(exc))
    except AppliedConfigUnreadable as exc:  # not the file's fault: the group runs a config this release cannot read
        click.echo(f"fairctl: error: {exc}", err=True)
        raise Exit(BAD_ARGUMENT) from None
    except RedisUnavailable as exc:
        fail(url_origin(), str(exc))  # the message names host:port only, never credentials
    except InvalidJob as exc:
        fail(argument_for_field.get(exc.field, f"--{exc.field}"), str(exc).removeprefix(f"{exc.field}: "))
    except BudgetRejected as exc:
        fail("TASK", str(exc), code=1)
    except TenantLimitReached as exc:  # temporary, as a budget rejection: exit 1
        fail("--tenant", str(exc), code=1)
    except EvictionPolicyError as exc:
        fail(url_origin(), str(exc))
    except RedisMemoryFull as exc:  # temporary, as a budget rejection: exit 1
        fail(url_origin(), str(exc), code=1)


def url_origin() -> str:
    """Where the running command's Redis URL came from, to start its Redis errors with:
    ``--redis-url``, ``FAIRCTL_REDIS_URL``, or ``FILE: redis.url`` (plain ``redis.url`` when
    several config files give URLs)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return "redis.url"
    if ctx.params.get("redis_url") is not None:
        return URL_VARIABLE if ctx.get_parameter_source("redis_url") is ParameterSource.ENVIRONMENT else "--redis-url"
    files = set(ctx.meta.get(_CONFIG_URLS, ()))
    return f"{files.pop()}: redis.url" if len(files) == 1 else "redis.url"


def load(config_path: Path, redis_url: str | None) -> Config:
    """The config with ``--redis-url`` applied; fails with exit code 2 on any config error.

    With no ``--config`` and no fairness.yaml in the working directory, the example config that
    ships with fairctl is read (and a line on stderr says so): an installed fairctl generates,
    checks and demonstrates with no file of the user's at hand."""
    with clear_errors():
        config = load_config(config_file(config_path))
    return with_redis_url(config, redis_url)


def load_queues(config_paths: Sequence[Path] | None, redis_url: str | None) -> list[tuple[Config, list[Config]]]:
    """The configs of several ``--config`` (default: the one :func:`load` reads), each with
    ``--redis-url`` applied, and each with its queue groups (:func:`groups_of`: itself, or a
    sharded one's shards); two that share a queue group (its keys, and the ``shard`` label their
    series would share: ``redis.prefix``, or a shard's name) fail with exit code 2."""
    configs = [load(path, redis_url) for path in config_paths or [DEFAULT_CONFIG]]
    queues = [(config, groups_of(config)) for config in configs]
    groups = [group_of(group) for _, held in queues for group in held]
    names = [group_of(config) for config in configs]  # the ``group`` label: two queues would add up as one
    twice = next((g for g in (*groups, *names) if groups.count(g) > 1 or names.count(g) > 1), None)
    if twice is not None:
        fail("--config", f"two configs describe queue group {twice} (their redis.prefix): give each group its own "
                         "prefix, and each config once")
    return queues


def groups_of(config: Config) -> list[Config]:
    """The queue groups ``config`` describes, each as a queue group's config: itself, or every shard
    a sharded queue's layout serves (re-sharding may have added some), under the names the layout
    gives them. Without Redis, off a Cluster, the config's redis.shards under their plain names
    (the names placement salts are a Cluster's); on a Cluster, exit 1. A config watching another
    job system's queues is its one group."""
    if watched(config) is not None:
        return [config]
    try:
        layout = open_queue(config).layout()
    except ValueError as exc:  # the message never repeats the URL
        fail(url_origin(), str(exc))
    except RedisUnavailable as exc:
        if is_cluster(config.redis.url):
            fail("--config", f"queue group {config.redis.prefix} is sharded over a Redis Cluster, and its shards' "
                             f"names are read from it: {exc}", code=1)
        return group_configs(config)
    if len(layout.prefixes) == 1 and layout.prefixes[0] == config.redis.prefix:
        return [config]
    return [shard_config(config, i, name) for i, name in enumerate(layout.prefixes[:layout.serve])]


def config_file(config_path: Path) -> Path:
    """The file ``--config`` stands for: the example config when it is the default and there is no
    fairness.yaml here (a line on stderr says so)."""
    if config_path == DEFAULT_CONFIG and not config_path.exists():
        click.echo(f"fairctl: no {DEFAULT_CONFIG} here; using the example config {EXAMPLE_CONFIG}", err=True)
        return EXAMPLE_CONFIG
    return config_path


def with_redis_url(config: Config, redis_url: str | None) -> Config:
    """``config`` on ``--redis-url`` when one is given (else its file is noted for
    :func:`url_origin`); fails with exit code 2 on a bad URL."""
    if redis_url is None:
        if config.source is not None and (ctx := click.get_current_context(silent=True)) is not None:
            ctx.meta.setdefault(_CONFIG_URLS, []).append(config.source)
        return config
    try:
        check_url(redis_url)
    except ValueError as exc:  # the message never echoes the URL: it may hold a password
        fail(url_origin(), str(exc))
    return dataclasses.replace(config, redis=dataclasses.replace(config.redis, url=redis_url))


def connect(config: Config) -> Queue:
    """The queue ``config`` describes (:func:`fairness_core.open_queue`), on a client that fails
    fast: no client-side retries, because re-sending a script whose reply was lost could run it
    twice (a duplicate enqueue); the worker retries whole operations itself instead. A config that
    watches another job system is refused: the queue would write its keys into that system's Redis."""
    return open_queue(config, _client(config))


def _client(config: Config) -> Any:
    if (watch := watched(config)) is not None:
        fail("--config", f"its watch section reads the queues of a {watch.system} deployment: only fairctl "
                         "exporter, generate and check use such a config; fairctl's own queues need one without watch")
    try:
        return redis_client(config.redis.url)
    except ValueError as exc:  # the message never repeats the URL
        fail(url_origin(), str(exc))


def check_classes(config: Config, names: list[str], argument: str) -> list[str]:
    """Class names given on the command line, each checked against the config."""
    for name in names:
        if name not in config.class_names:
            fail(argument, f"unknown class {name!r}; configured: {', '.join(config.class_names)}")
    return names


def check_policies(names: Sequence[str]) -> tuple[str, ...]:
    """Scheduling policies given with ``--policy``, each checked against the known ones."""
    for name in names:
        if name not in POLICIES:
            fail("--policy", f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")
    return tuple(names)
