"""Admin operations shared by the shell and the HTTP API (ops), HTTP server, recover, decommission."""
