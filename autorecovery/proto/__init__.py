"""Generated protobuf and gRPC code (lowest floor): our bookie protocol (``bookie.proto``), upstream's
DataFormats and v3 wire protocol, from ``proto/`` by ``make proto`` (a test fails when it is stale).

Imports only ``protobuf``/``grpc``; every other package may import it.
"""
