"""Suite-wide test settings.

Hypothesis runs derandomized by default, so a CI run is repeatable: the same
commit draws the same examples. ``pytest --hypothesis-profile explore`` draws
fresh examples (use it when hunting, and turn a failure into a fixed test).
"""

import logging
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def _iterserve_logging_restored() -> Iterator[None]:
    """A test that runs ``serve`` in process configures the ``iterserve``
    logger (cli/serve.configure_logging); later tests get it back as it was,
    so no test's server writes its access lines to the real stderr."""
    logger = logging.getLogger("iterserve")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
