"""Offline capacity, placement and failure-domain reports on PySpark (issue 11): snapshot export, synthetic snapshots, Spark jobs, HTML."""
