"""Shared test settings: a bounded hypothesis profile so the suite fits CI's budget."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# CI (which sets CI=true, as .ci/run does) gets the bounded profile; HYPOTHESIS_PROFILE overrides either way.
_default = "ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))
