# The fairctl images, one per role, from this one file (docs/deployment.md measures each):
#   docker build --target runtime -t fairctl:0.1.0 .            the worker and the exporter sidecar
#   docker build --target operator -t fairctl-operator:0.1.0 .  every command with every extra: generate,
#                                                                check, simulate --report, loadgen into Celery
# Both run as an unprivileged user. runtime is the base install, with nothing that draws or renders
# (it also runs loadgen into fairctl's own queues and the stack's webhook receiver); operator adds
# the `all` extra (the report's charts, the rule and dashboard generators, the loadgen clients of
# Celery, RQ and BullMQ).
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# The repository, installed with pip: the scenarios (fairness_sim/scenarios/) and the example
# config (fairness_core/examples/fairness.yaml) are package data, so the installed fairctl finds
# them by name wherever it runs; the containers read their own config from a mount.
COPY . .
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home --home-dir /nonexistent fairctl \
    && mkdir /data && chown fairctl /data
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001
ENTRYPOINT ["fairctl"]
CMD ["--help"]

FROM runtime AS operator
USER 0
RUN pip install '.[all]'
USER 10001
