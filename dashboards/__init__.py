"""Grafana dashboards generated from the config and the metric contract (``fairctl generate``).

The overview answers "is every class within its SLO and getting its weight?" and the tenant
drill-down answers "what is this one tenant getting?"; both read the same recording rules as the
alerts, so a panel and the alert it explains never disagree. The third, the runbooks dashboard,
holds every alert's runbook, one panel each, where the alerts' ``runbook_url`` points.
"""
