"""Shared test settings: a bounded hypothesis profile so the suite fits CI's budget; where the
cl100k_base ranks are (the `cl100k_path` fixture)."""
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
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


# ---- the published cl100k_base ranks, found where tiktoken's users have them -----------------
CL100K_ENV = "CL100K_BASE_TIKTOKEN"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
SHARED_CL100K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cl100k_base.tiktoken"


def cl100k_candidates() -> list[tuple[str, Path]]:
    """(where, path) in the order looked at: $CL100K_BASE_TIKTOKEN, tiktoken's cache (the file
    tiktoken.get_encoding("cl100k_base") downloaded, under the sha1 of its URL in
    $TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR or <tmp>/data-gym-cache), ../shared/data/."""
    out = []
    if os.environ.get(CL100K_ENV):
        out.append((f"${CL100K_ENV}", Path(os.environ[CL100K_ENV])))
    cache = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR",
                                                                 os.path.join(tempfile.gettempdir(), "data-gym-cache")))
    if cache:
        out.append(("tiktoken's cache", Path(cache) / hashlib.sha1(CL100K_URL.encode()).hexdigest()))
    out.append(("../shared/data", SHARED_CL100K))
    return out


def find_cl100k() -> tuple[Path | None, str]:
    """(the first candidate holding the published ranks, or None; what was found or how to provide them)."""
    for where, path in cl100k_candidates():
        if path.is_file():
            if hashlib.sha256(path.read_bytes()).hexdigest() == CL100K_SHA256:
                return path, f"{path} ({where})"
            return None, f"{path} ({where}) is not the published cl100k_base.tiktoken (sha256 {CL100K_SHA256[:8]}...)"
    return None, (f"the cl100k_base ranks are not on this machine: set {CL100K_ENV}=FILE (the published "
                  "cl100k_base.tiktoken), or run python -c \"import tiktoken; tiktoken.get_encoding('cl100k_base')\" "
                  "once with network (tiktoken's cache is read), or put it in ../shared/data/")


@pytest.fixture(scope="session")
def cl100k_path() -> Path:
    """The cl100k_base.tiktoken file (find_cl100k); the test skips, saying how to provide it, without one."""
    path, said = find_cl100k()
    if path is None:
        pytest.skip(said)
    return path
