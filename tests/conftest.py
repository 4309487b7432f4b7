"""Suite-wide test settings.

Hypothesis runs derandomized by default, so a CI run is repeatable: the same
commit draws the same examples. ``pytest --hypothesis-profile explore`` draws
fresh examples (use it when hunting, and turn a failure into a fixed test).
"""

from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")
