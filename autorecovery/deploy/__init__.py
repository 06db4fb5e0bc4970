"""Deployment artefacts generated from code: Grafana dashboard, Prometheus rules, systemd and k8s
files (top floor, next to ``cli``). Not imported by the daemon: ``.importlinter`` keeps this package
in the top floor, and it imports nothing of ours today.
"""
