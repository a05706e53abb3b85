"""The `re` twins of the built-in patterns find exactly the chunks `regex` finds, on any text."""
import pytest
import regex
from hypothesis import given, settings, strategies as st

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN
from bpe.text import repair_surrogates
from bpe.split.twins import chunk_finder, twin

BUILT_IN = [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN]

# Every whitespace kind (\x1c-\x1f are whitespace to `re` and str.isspace, not to `regex`).
SPACES = list("\t\n\x0b\x0c\r \x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000"
              "\u180e\u200b\ufeff")
# Digits and numbers of other scripts, marks, letters of every case class, astral characters.
OTHERS = (list("09٣५௫０²½Ⅻ〇") + ["\U0001d7ce", "\U00010107"]            # numbers
          + list("\u0301\u0308\u093f\u0e31\u20dd\u302a")                    # combining marks
          + list("aZéÉǅʰ字한ᄀあアßﬁ") + ["\U0001d400", "\U0001d41a", "\U00020000"]  # letters
          + list("sStTdDmMlLvVrReEſKİı'’") + ["\U0001f389", "\U0001f3fb", "\u200d"]  # contractions, emoji
          + list("!/.,:-_\\\"#") + ["\x00", "\x7f", "\ud800", "\udc80", "\udfff", "\ue000", "\U0010ffff"])
mixed = st.text(alphabet=st.sampled_from(SPACES + OTHERS), max_size=60)
anything = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60)


@pytest.mark.parametrize("pattern", BUILT_IN)
@settings(max_examples=300, deadline=None)
@given(text=mixed | anything)
def test_twin_finds_the_chunks_regex_finds(pattern, text):
    want = regex.findall(pattern, text)
    assert chunk_finder(pattern)(text) == want
    repaired = repair_surrogates(text)
    assert chunk_finder(pattern)(repaired) == regex.findall(pattern, repaired)


@pytest.mark.parametrize("pattern", BUILT_IN)
@settings(max_examples=200, deadline=None)
@given(text=mixed | anything)
def test_the_twin_without_possessive_quantifiers_finds_the_same_chunks(pattern, text):
    """The form Python 3.10 compiles (its `re` has no possessive quantifiers)."""
    text = "".join(c for c in text if c <= "\uffff")  # the plane; astral text goes through stand-ins
    assert twin(pattern, possessive=False).findall(text) == regex.findall(pattern, text)


@pytest.mark.parametrize("pattern", BUILT_IN)
def test_twin_agrees_on_every_plane_character(pattern):
    """Each character below U+10000 alone and between letters, spaces and an apostrophe."""
    find = chunk_finder(pattern)
    chars = "".join(map(chr, range(0x10000)))
    for wrap in ("{}", "a{}b", " {} ", "'{}", "1{}2", "\n{}\n"):
        text = "".join(wrap.format(c) for c in chars)
        assert find(text) == regex.findall(pattern, text)


@pytest.mark.parametrize("pattern", BUILT_IN)
def test_astral_characters_keep_their_class(pattern):
    text = " ".join(chr(cp) for cp in range(0x10000, 0x110000, 97)) + " x'S 𝐀𝐚's"
    assert chunk_finder(pattern)(text) == regex.findall(pattern, text)


def test_contractions_follow_regexs_case_folding():
    text = "it'S it'ſ he'LL we'Ve they'rE I'M 'd 'D 'K'k"
    for pattern in (GPT4_PATTERN, O200K_PATTERN):
        assert chunk_finder(pattern)(text) == regex.findall(pattern, text)


def test_custom_patterns_run_under_regex():
    assert twin(r"\p{L}+|\s+|.") is None
    assert chunk_finder(r"\p{L}+|\s+|.")("héllo 字!") == ["héllo", " ", "字", "!"]


@given(text=st.text(max_size=40) | st.lists(st.sampled_from(["a", "é", "Ж", "字", "🎉", "\U0010ffff", "\uffff"]),
                                            max_size=20).map("".join))
def test_has_astral_says_whether_a_character_is_above_the_plane(text):
    from bpe.split.twins import has_astral

    want = any(ord(c) > 0xFFFF for c in text)
    assert has_astral(text) == want
    if "\0" not in text and not any(0xD800 <= ord(c) < 0xE000 for c in text):
        type(text, (), {})  # CPython caches the name's UTF-8 copy, which sys.getsizeof counts
        assert has_astral(text) == want


def test_astral_stand_ins_are_one_for_one_and_a_missing_one_sends_the_text_to_regex(monkeypatch):
    from bpe.split import twins

    text = "a\U0001d400\U0001d41a's 🎉🎉x\U00020000\U0010ffff 1\U0001d7ce!"
    astral = twins._Astral()
    out = astral.replace(text)
    assert len(out) == len(text) and max(out) <= "\uffff"
    assert [o for o, t in zip(out, text) if t <= "\uffff"] == [t for t in text if t <= "\uffff"]
    assert astral.replace(text) == out  # the characters met are remembered
    # A character whose class no character of the plane has: the whole text goes to `regex`.
    lacking = twins._Astral()
    monkeypatch.setattr(lacking, "_stand_in", lambda sig: None if sig[0] else astral._stand_in(sig))
    assert lacking.replace("x🎉") is not None and lacking.replace(text) is None
    assert lacking.replace("🎉🎉") is not None and "\U0001d400" in lacking._lacking
    monkeypatch.setattr(twins, "_astral", lambda: lacking)
    for pattern in BUILT_IN:
        assert chunk_finder(pattern)(text) == regex.findall(pattern, text)
