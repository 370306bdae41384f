"""Prometheus metrics: the gauges operators alert on, read from the ledger at scrape time with queries whose cost
follows the work in flight, not the history (ledger_reads.py), exported by a custom collector (collector.py) at
`/metrics` on the intake server or alone (http.py, `evidence metrics serve`). Alert rules: deploy/prometheus/."""
