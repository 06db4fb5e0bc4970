"""Deployment artefacts generated from code (not imported by the daemon: ``.importlinter`` keeps this
package in the top layer, next to the CLI)."""
