"""exporter: the Prometheus sidecar. ``metrics`` is the metric contract (imported by the alert
rules and dashboards), ``collector`` reads one queue group's ``snapshot()`` per scrape under a hard
time budget, ``server`` serves ``/metrics`` over HTTP or HTTPS."""
