"""autorecovery: BookKeeper AutoRecovery in Python (see README.md).

Importing the package installs quiet logging defaults for library use (:func:`autorecovery.logs.library_defaults`):
nothing reaches the console until the program configures logging.
"""

from autorecovery.logs import library_defaults as _library_defaults

_library_defaults()
