"""Split patterns from files, bounded: a rule that refuses catastrophic backtracking, and a time budget.

A split pattern read from a tokenizer file (ours, a ``.tiktoken`` side file, a Hugging Face
``tokenizer.json``) or given as ``--pattern`` runs under `regex`, a backtracking engine. A
pattern such as ``(?:a+)+$|[\\s\\S]`` makes it try every way of cutting a run of ``a`` between
the two repeats before it fails: cubic time or worse in the text's length. Two defences:

**The rule** (``check_pattern``, parsing the pattern as `regex` does: classes, escapes, groups,
lookarounds, flags). Every *backtracking repeat* (``*``, ``+``, ``{m,n}`` with n > 1 or none,
greedy or lazy; a possessive repeat ``*+ ++ ?+ {0,n}+ {1,n}+`` never gives back what it took
and is exempt) must repeat a *deterministic* part, one that can match at most one way at any
position: a single character (a literal, ``.``, ``[...]``, ``\\p{L}``, ``\\d``, ``\\s``, ``\\X``...),
a zero-width assertion (``^ $ \\b``, a lookaround: `regex` never backtracks into one), an
atomic group ``(?>...)`` or a possessive repeat, an exact repeat ``X{k}`` of a deterministic
part, or a sequence of these. Refused, then: a repeat inside a repeat (``(?:a+)+``,
``(a*)*``), an alternation or an optional part under a repeat (``(?:a|aa)+``, ``(?:ab?)+``),
backreferences and recursion (NP-hard in general), and verbose mode (whose whitespace rules
this parser does not follow). Lookaround and group bodies obey the rule themselves.

Why it bounds matching: each iteration of a repeat over a deterministic part has at most one
way to match, so from one start the repeat's only choice is how many iterations to keep,
at most n + 1 for a text of n characters. The number of paths the engine tries from one start
is then at most a product of (n + 1) per repeat met in sequence and a constant per
alternation or ``?``: a polynomial whose degree is the number of repeats in one
alternative, never the exponential (or, in `regex`'s memoised form, the n^3 of the issue)
that nested repeats give. Every split pattern in use obeys it: GPT-2's (Hugging Face's
ByteLevel default), cl100k's, o200k's, LLaMA-3's, Qwen2's, DeepSeek's digit and CJK splits.

**The budget.** Repeats in sequence over overlapping characters (``a*a*b``) are allowed by the
rule and can still cost n^2 per start, so every match call of a pattern that is not built in
gets ``timeout=`` from ``time_budget`` (a second plus a generous per-character allowance:
linear in the text, many times what a sound pattern needs), and a pattern that runs out of it
raises ``PatternTimeout`` naming the pattern.
"""
from __future__ import annotations

import re
from typing import Callable

MAX_PATTERN_CHARS = 5000  # split patterns in use are under 500; this bounds the work per position
BUDGET_SECONDS = 1.0
BUDGET_PER_CHAR = 2e-5  # seconds; a sound pattern needs well under a microsecond a character

_ZERO = set("bBAZzGmMK")  # zero-width escapes
_END = "<end>"  # what peek gives past the end: not in any string of single characters
_POSIX = re.compile(r"\[:\^?[\w ]+(?:=[\w ]+)?:\]")  # [:alpha:] inside a class
_FUZZY = re.compile(r"\{[\sesid0-9<=>+\-*,:]*[esid][\sesid0-9<=>+\-*,:]*\}")  # {e<=1}: fuzzy matching


class PatternTimeout(ValueError):
    """A split pattern that is not built in ran past its time budget on one text."""


class _Refused(Exception):
    def __init__(self, pos: int, why: str):
        self.pos, self.why = pos, why


# A node is a tuple: ("one", pos) one character | ("zero", pos, body) an assertion |
# ("seq", items) | ("alt", branches) | ("group", kind, body) with kind plain/atomic |
# ("rep", body, lo, hi, mode, start, end) with hi None when unbounded, mode greedy/lazy/possessive.
class _Parser:
    def __init__(self, s: str, v1: bool):
        self.s, self.i, self.v1 = s, 0, v1

    def peek(self, k: int = 0) -> str:
        """The character ``k`` ahead, or _END (in no set of characters) past the end."""
        return self.s[self.i + k] if self.i + k < len(self.s) else _END

    def alternation(self):
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self):
        items = []
        while self.i < len(self.s) and self.peek() not in "|)":
            start = self.i
            atom = self.atom()
            if atom is not None:
                items.append(self.repeats(atom, start))
        return ("seq", items)

    def atom(self):
        c, pos = self.peek(), self.i
        self.i += 1
        if c == "(":
            return self.group(pos)
        if c == "[":
            self.char_class(pos)
            return ("one", pos)
        if c == "\\":
            return self.escape(pos)
        if c in "^$":
            return ("zero", pos, None)
        return ("one", pos)  # a literal, ".", or a "{" that is no quantifier

    def char_class(self, pos: int) -> None:
        """Skip to the end of a class opened at ``pos``, as `regex` reads it: the first member is
        never the end, ``[:name:]`` is a POSIX class, and ``[`` opens a nested set in V1 only."""
        s, depth, fresh = self.s, 1, True  # fresh: just after a "[", where "^" and then "]" are members
        while self.i < len(s):
            if fresh and s[self.i] == "^":
                self.i += 1
            c = self.peek()
            if c == "]" and not fresh:
                self.i += 1
                depth -= 1
                if depth == 0:
                    return
                continue
            fresh = False
            posix = _POSIX.match(s, self.i)
            if c == "\\":
                self.i += 2
            elif posix:
                self.i = posix.end()
            elif c == "[" and self.v1:
                self.i, depth, fresh = self.i + 1, depth + 1, True
            else:
                self.i += 1
        raise _Refused(pos, "a character class that does not end")

    def escape(self, pos: int):
        c = self.peek()
        self.i += 1
        if c in "pPN" and self.peek() == "{":
            end = self.s.find("}", self.i)
            self.i = end + 1 if end > 0 else len(self.s)
            return ("one", pos)
        octal = self.s[self.i - 1:self.i + 2]
        if c in "123456789" and not (len(octal) == 3 and all(d in "01234567" for d in octal)):
            raise _Refused(pos, "a backreference")
        if c in "gk" and self.peek() in "<{'":
            raise _Refused(pos, "a backreference or subroutine call")
        if c in _ZERO:
            return ("zero", pos, None)
        if c == "x" and self.peek() == "{":
            self.i = self.s.find("}", self.i) + 1 or len(self.s)
        return ("one", pos)  # \d \s \w \X \xhh \uhhhh \n, or an escaped literal

    def group(self, pos: int):
        s, kind = self.s, "plain"
        if self.peek() == "?":
            self.i += 1
            c, d = self.peek(), self.peek(1)
            if c == "#":  # a comment
                self.i = s.index(")", self.i) + 1
                return None
            if c in ":|":
                self.i += 1
            elif c == ">":
                kind, self.i = "atomic", self.i + 1
            elif c in "=!" or (c == "<" and d in "=!"):
                self.i += 1 if c in "=!" else 2
                return ("zero", pos, self.body(pos))
            elif (c == "P" and d == "<") or c == "<":
                self.i = s.index(">", self.i) + 1  # a named group
            elif c in "(R&" or c.isdigit() or (c in "+-" and d.isdigit()) or (c == "P" and d in "=>"):
                raise _Refused(pos, "a conditional, recursion or backreference group")
            elif not self.flags(pos):
                raise _Refused(pos, "a group this checker does not know")
            elif s[self.i - 1] == ")":
                return None  # global flags such as (?i)
        return ("group", kind, self.body(pos))

    def flags(self, pos: int) -> bool:
        """Read inline flags ``(?i)`` or ``(?i-s:``; False when what follows ``(?`` is not flags."""
        j = self.i
        while j < len(self.s) and (self.s[j].isalnum() or self.s[j] == "-"):
            j += 1
        if j == self.i or j >= len(self.s) or self.s[j] not in ":)":
            return False
        on = self.s[self.i:j].split("-")[0]
        if "x" in on:
            raise _Refused(pos, "verbose mode (?x), whose whitespace and comments this checker does not read")
        self.i = j + 1
        return True

    def body(self, pos: int):
        node = self.alternation()
        if self.peek() != ")":
            raise _Refused(pos, "a group that does not close")
        self.i += 1
        return node

    def repeats(self, node, start: int):
        while True:
            lo_hi = self.quantifier()
            if lo_hi is None:
                return node
            mode = "greedy"
            if self.peek() in "?+":
                mode = "lazy" if self.peek() == "?" else "possessive"
                self.i += 1
            node = ("rep", node, lo_hi[0], lo_hi[1], mode, start, self.i)

    def quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if c != "{":
            return None
        if _FUZZY.match(self.s, self.i):
            raise _Refused(self.i, "fuzzy matching")
        end = self.s.find("}", self.i)
        inside = self.s[self.i + 1:end] if end > 0 else ""
        lo, comma, hi = inside.partition(",")
        if not (lo.isascii() and hi.isascii() and (lo + hi).isdigit() or lo.isdigit() and not comma and lo.isascii()):
            return None  # not a quantifier: `regex` reads "{" as a literal
        self.i = end + 1
        lo_n = int(lo) if lo else 0
        return (lo_n, int(hi) if hi else (lo_n if not comma else None))


def _deterministic(node) -> bool:
    """Whether ``node`` can match at most one way at any position (see the module docstring)."""
    kind = node[0]
    if kind in ("one", "zero"):
        return True
    if kind == "seq":
        return all(map(_deterministic, node[1]))
    if kind == "alt":
        return False
    if kind == "group":
        return node[1] == "atomic" or _deterministic(node[2])
    _, body, lo, hi, mode, _, _ = node
    return (mode == "possessive" and lo <= 1) or (lo == hi and _deterministic(body))


def _check(node, pattern: str) -> None:
    kind = node[0]
    children = {"seq": lambda: node[1], "alt": lambda: node[1], "group": lambda: [node[2]],
                "zero": lambda: [node[2]] if node[2] is not None else [], "rep": lambda: [node[1]],
                "one": lambda: []}[kind]()
    if kind == "rep":
        _, body, lo, hi, mode, start, end = node
        backtracks = (hi is None or hi > 1) and not (mode == "possessive" and lo <= 1)
        if backtracks and not _deterministic(body):
            raise _Refused(start, f"{pattern[start:end][:60]!r} repeats a part that can match the same "
                                  "text in more than one way (a repeat inside a repeat, or an alternation "
                                  "or optional part under one)")
    for child in children:
        _check(child, pattern)


def check_pattern(pattern: str) -> None:
    """Raise ValueError when ``pattern`` breaks the rule of the module docstring (or is too long)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"split pattern of {len(pattern):,} characters refused: at most "
                         f"{MAX_PATTERN_CHARS:,} (patterns in use are under 500)")
    import regex

    try:
        compiled = regex.compile(pattern)
        if compiled.flags & regex.VERBOSE:
            raise _Refused(0, "verbose mode (?x), whose whitespace and comments this checker does not read")
        p = _Parser(pattern, bool(compiled.flags & regex.V1))
        tree = p.alternation()
        if p.i != len(pattern):
            raise _Refused(p.i, "an unbalanced ')'")
        _check(tree, pattern)
    except _Refused as e:
        raise ValueError(f"split pattern {pattern[:60]!r} refused: at character {e.pos}, {e.why}; such a "
                         "pattern can make matching take time exponential (or a high power) in the text's "
                         "length. Repeat single characters or classes ([ab]+, not (?:a|b)+), or make the "
                         "repeat possessive (++, *+) or atomic ((?>...))") from None
    except (ValueError, IndexError, regex.error):  # malformed: a group that does not close
        raise ValueError(f"split pattern {pattern[:60]!r} refused: it cannot be read as a regex") from None


def time_budget(n_chars: int) -> float:
    """Seconds a pattern that is not built in may take on a text of ``n_chars`` characters."""
    return BUDGET_SECONDS + n_chars * BUDGET_PER_CHAR


def timed_out(pattern: str, n_chars: int) -> PatternTimeout:
    """The error for ``pattern`` running past its budget on ``n_chars`` characters."""
    return PatternTimeout(
        f"split pattern {pattern[:60]!r} took more than {time_budget(n_chars):.3g} s on a text of "
        f"{n_chars:,} characters, far more than a split pattern needs: it backtracks (repeats of "
        "overlapping characters in sequence, such as a*a*b); write it with possessive repeats (++, *+)")


def budgeted(findall: Callable, pattern: str) -> Callable[[str], list[str]]:
    """``findall`` of a compiled `regex` pattern under ``time_budget``; a timeout raises PatternTimeout."""
    def call(text: str) -> list[str]:
        try:
            return findall(text, timeout=time_budget(len(text)))
        except TimeoutError:
            raise timed_out(pattern, len(text)) from None

    return call
