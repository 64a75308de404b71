"""Scenarios replayed against the scheduler: in virtual time on the reference model (``fairctl
simulate``), and live and time-compressed on a real stack (``fairctl drill``, ``fairctl loadgen``),
with the alerts Prometheus fires checked against what each scenario expects."""
