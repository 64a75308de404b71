"""Generated Prometheus alert rules, their promtool unit tests and runbooks, from one ``Config``.

Everything is built from the loaded config and the metric contract (``exporter.metrics``): no
metric name is typed here, so a renamed metric breaks generation, not a silent rule. Layers:
``promql`` (expression helpers), ``recording`` (shared expressions), ``rules`` (the alerts),
``annotations`` (one text rendered both as a Prometheus template and as the text a unit test
expects), ``unittests``, ``runbooks``, ``output`` (the files ``fairctl generate`` writes),
``promtool`` (the binary's wrapper) and ``weights`` (the weights lint of ``fairctl check``).
"""
