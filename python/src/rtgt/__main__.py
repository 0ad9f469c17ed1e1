"""``python -m rtgt``: the same as ``rtgt-rpc``."""

from .cli import run

run()
