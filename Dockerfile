# The fairctl image of compose/docker-compose.yml and deploy/kubernetes/: every fairctl command
# (worker, exporter, loadgen, stack webhook ...), run as an unprivileged user.
#   docker build -t fairctl:0.1.0 .
FROM python:3.11-slim

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
