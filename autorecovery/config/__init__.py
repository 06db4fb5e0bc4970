"""Configuration: the key table (:mod:`.keys`, PURE) and the loader (:mod:`.load`)."""
