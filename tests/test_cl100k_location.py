"""The cl100k_base ranks are found where tiktoken's users have them, and a skip says how to provide them."""
import hashlib

import pytest

from tests import conftest


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No ranks anywhere: no variable, an empty tiktoken cache, no ../shared/data."""
    for name in (conftest.CL100K_ENV, "DATA_GYM_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(conftest, "SHARED_CL100K", tmp_path / "shared" / "cl100k_base.tiktoken")
    return tmp_path


def test_without_the_ranks_the_reason_says_how_to_provide_them(nowhere):
    path, said = conftest.find_cl100k()
    assert path is None
    assert conftest.CL100K_ENV in said and "tiktoken.get_encoding('cl100k_base')" in said and "../shared/data" in said


def test_the_variable_then_tiktokens_cache_are_read(nowhere, monkeypatch):
    data = b"fake ranks\n"
    monkeypatch.setattr(conftest, "CL100K_SHA256", hashlib.sha256(data).hexdigest())
    cached = nowhere / "cache" / hashlib.sha1(conftest.CL100K_URL.encode()).hexdigest()
    cached.parent.mkdir()
    cached.write_bytes(data)  # where tiktoken.get_encoding("cl100k_base") leaves the download
    path, said = conftest.find_cl100k()
    assert path == cached and "tiktoken's cache" in said
    named = nowhere / "mine.tiktoken"
    named.write_bytes(data)
    monkeypatch.setenv(conftest.CL100K_ENV, str(named))
    assert conftest.find_cl100k()[0] == named  # the variable comes first


def test_a_file_that_is_not_the_published_one_is_not_used(nowhere, monkeypatch):
    (nowhere / "other.tiktoken").write_bytes(b"not cl100k\n")
    monkeypatch.setenv(conftest.CL100K_ENV, str(nowhere / "other.tiktoken"))
    path, said = conftest.find_cl100k()
    assert path is None and "is not the published cl100k_base.tiktoken" in said
