"""mixft's one logger. The library never prints; the CLI decides what reaches the terminal."""

import logging

logger = logging.getLogger("mixft")
logger.addHandler(logging.NullHandler())
