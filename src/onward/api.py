"""The Python API's former home, kept so ``from onward.api import ...`` goes on working:
the code lives in :mod:`onward.client`, and this module exports exactly its public names."""

from onward.client import *  # noqa: F403
from onward.client import __all__ as __all__
