"""Configuration, on two floors: the key table and the settings sections are PURE (lowest floor: one
table of upstream and our keys with type, unit, bounds and docs); the loader (``bk_server.conf`` +
``BK_<key>`` environment + flags → frozen settings) and TLS files are process services, one floor up.

The PURE half may import only the PURE core; the loader may import the PURE core too (``placement``'s
``PlacementConfig``, ``errors``) but no edge, role or command (``.importlinter``).
"""
