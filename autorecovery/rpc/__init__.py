"""gRPC edge: protobuf conversions (convert.py, PURE) and the bookie client (bookie_client.py)."""
