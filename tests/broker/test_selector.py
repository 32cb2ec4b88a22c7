"""The JMS selector language over STOMP headers (broker/selector.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.broker.selector import (
    MAX_LIKE_CHARS,
    MAX_NUMBER_CHARS,
    MAX_SELECTOR_CHARS,
    MAX_SELECTOR_DEPTH,
    compile_selector,
    like_matcher,
)
from shoal.errors import InvalidHeader, InvalidSelector

CASES = [
    # numeric headers compare numerically with numbers (ActiveMQ)
    ("price > 10", {"price": "100"}, True),
    ("price > 10", {"price": "9"}, False),
    ("price > 10", {}, False),
    ("price > 10", {"price": "abc"}, False),
    ("price >= 9.5", {"price": "9.5"}, True),
    ("price < 1e3", {"price": "999"}, True),
    ("price <= -2", {"price": "-2"}, True),
    ("price = 10", {"price": "10.0"}, True),
    ("price <> 10", {"price": "11"}, True),
    ("price = 0x1F", {"price": "31"}, True),
    ("price = 10L", {"price": "10"}, True),
    ("price = 2.5F", {"price": "2.5"}, True),
    # strings compare as strings
    ("color = 'red'", {"color": "red"}, True),
    ("color = 'red'", {"color": "Red"}, False),
    ("color <> 'red'", {"color": "blue"}, True),
    ("color <> 'red'", {}, False),  # NULL is unknown, not different
    ("name = 'O''Brien'", {"name": "O'Brien"}, True),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {"a": "x"}, False),
    ("code = '10'", {"code": "10.0"}, False),  # string literal: string comparison
    # booleans
    ("flag = TRUE", {"flag": "true"}, True),
    ("flag = true", {"flag": "FALSE"}, False),
    ("flag", {"flag": "true"}, True),
    ("flag", {"flag": "yes"}, False),
    ("NOT flag", {"flag": "false"}, True),
    ("TRUE", {}, True),
    ("FALSE OR TRUE", {}, True),
    # logic, three-valued, precedence, parentheses
    ("a = 1 AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 AND b = 2", {"a": "1"}, False),
    ("a = 1 OR b = 2", {"b": "2"}, True),
    ("a = 1 OR b = 2 AND c = 3", {"a": "1"}, True),
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1"}, False),
    ("NOT (a = 1)", {"a": "2"}, True),
    ("NOT (a = 1)", {}, False),  # NOT unknown is unknown
    ("NOT a = 1 OR TRUE", {}, True),
    ("a = 1 and B = 2 Or c = 3", {"c": "3"}, True),  # keywords are case-insensitive
    # LIKE with ESCAPE
    ("name LIKE 'ab%'", {"name": "abcdef"}, True),
    ("name LIKE 'ab%'", {"name": "xabc"}, False),
    ("name LIKE 'a_c'", {"name": "abc"}, True),
    ("name LIKE 'a_c'", {"name": "abbc"}, False),
    ("name NOT LIKE 'a%'", {"name": "b"}, True),
    ("name NOT LIKE 'a%'", {}, False),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "100%"}, True),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "1000"}, False),
    ("name LIKE 'a.c'", {"name": "abc"}, False),  # regex characters are literal
    ("name LIKE '%'", {"name": "multi\nline"}, True),
    # IN
    ("c IN ('red', 'green')", {"c": "green"}, True),
    ("c IN ('red', 'green')", {"c": "blue"}, False),
    ("c NOT IN ('red', 'green')", {"c": "blue"}, True),
    ("c NOT IN ('red')", {}, False),
    # BETWEEN
    ("n BETWEEN 1 AND 5", {"n": "5"}, True),
    ("n BETWEEN 1 AND 5", {"n": "6"}, False),
    ("n NOT BETWEEN 1 AND 5", {"n": "6"}, True),
    ("n NOT BETWEEN 1 AND 5", {}, False),
    ("n BETWEEN 1 AND 5 AND m = 1", {"n": "2", "m": "1"}, True),
    # IS [NOT] NULL
    ("x IS NULL", {}, True),
    ("x IS NULL", {"x": ""}, False),
    ("x IS NOT NULL", {"x": "1"}, True),
    # arithmetic
    ("a + b * 2 = 7", {"a": "1", "b": "3"}, True),
    ("(a + b) * 2 = 8", {"a": "1", "b": "3"}, True),
    ("a / 2 = 3", {"a": "7"}, True),  # integer division truncates, as Java
    ("-a / 2 = -3", {"a": "7"}, True),
    ("a / 2.0 = 3.5", {"a": "7"}, True),
    ("a / 0 = 1", {"a": "7"}, False),  # unknown, no error
    ("-x > -2", {"x": "1"}, True),
    ("a - 1 > 0", {"a": "x"}, False),
    # identifiers with '.' and '$', JMS names
    ("app.kind = 'x'", {"app.kind": "x"}, True),
    ("$v = 1", {"$v": "1"}, True),
    ("JMSType = 'car'", {"type": "car"}, True),
    ("JMSCorrelationID = 'c1'", {"correlation-id": "c1"}, True),
    ("JMSPriority > 3", {}, True),  # default priority 4
    ("JMSPriority > 3", {"priority": "2"}, False),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "true"}, True),
    ("JMSDeliveryMode = 'PERSISTENT'", {}, False),
    # values that must not break evaluation
    ("n > 1.5", {"n": "9" * 5000}, False),  # past Python's int digit limit: not a number
    ("n + 0.5 > 1", {"n": "9" * 400}, False),  # too large for a float: unknown
    ("n > 1", {"n": "1_000"}, False),  # only plain decimal notation is numeric
    ("n > 1", {"n": " 5"}, False),
    ("n > 1", {"n": "²"}, False),  # a Unicode digit is not a number
    ("n = 7", {"n": "007"}, True),
    ("n > 1", {"n": "9" * (MAX_NUMBER_CHARS + 1)}, False),  # too long to be a number
    ("n * n * n > 1", {"n": "9" * 200}, False),  # past a double's range: unknown
    ("n * n > 1", {"n": str(2**62)}, True),  # past 64 bits: a double
    ("n * 2 = 9223372036854775806", {"n": str(2**62 - 1)}, True),  # exact within 64 bits
    # LIKE: each part between % found in turn, _ one character
    ("name LIKE '%a%b%'", {"name": "xxaxxbxx"}, True),
    ("name LIKE '%a%b%'", {"name": "xxbxxaxx"}, False),
    ("name LIKE 'a%a'", {"name": "a"}, False),  # the first and last part may not overlap
    ("name LIKE 'a%a'", {"name": "aa"}, True),
    ("name LIKE '_%_'", {"name": "é\n"}, True),
    ("name LIKE '%_b_%'", {"name": "aab"}, False),
    ("name LIKE 'x!%%!_' ESCAPE '!'", {"name": "x%yz_"}, True),
    ("name LIKE 'x!%%!_' ESCAPE '!'", {"name": "xyz_"}, False),
    ("name LIKE '%%'", {"name": ""}, True),
    ("name LIKE ''", {"name": ""}, True),
    ("name LIKE ''", {"name": "a"}, False),
]


@pytest.mark.parametrize(("text", "headers", "expected"), CASES)
def test_selector_table(text, headers, expected):
    assert compile_selector(text).matches(headers) is expected


INVALID = [
    "",
    "   ",
    "price >",
    "price > > 1",
    "a LIKE b",
    "a = 'unterminated",
    "((a = 1)",
    "a IN (1, 2)",
    "a IN ()",
    "price + 1",
    "'just a string'",
    "42",
    "NOT 5",
    "a = 1 AND 7",
    "TRUE > FALSE",
    "-'x' = 1",
    "a LIKE 'x' ESCAPE 'ab'",
    "a LIKE 'x!' ESCAPE '!'",
    "a == 1",
    "a = 1;",
    "1 = 1 extra",
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_selectors_are_refused_with_their_text(text):
    with pytest.raises(InvalidSelector) as err:
        compile_selector(text)
    assert isinstance(err.value, InvalidHeader)  # maps to an ERROR frame naming the header
    assert err.value.header == "selector"
    assert "selector" in str(err.value)


def test_limits():
    long = "a = 1 OR " * (MAX_SELECTOR_CHARS // 9) + "a = 1"
    with pytest.raises(InvalidSelector, match="longer than"):
        compile_selector(long)
    n = MAX_SELECTOR_DEPTH
    for deep in ("NOT " * n + "a = 1", "(a = 1 OR " * n + "a = 1" + ")" * n):
        with pytest.raises(InvalidSelector, match="nested deeper"):
            compile_selector(deep)
    # parentheses count, redundant ones too (not inside a string)
    assert compile_selector("(" * n + "a = 1" + ")" * n).matches({"a": "1"})
    with pytest.raises(InvalidSelector, match="nested deeper"):
        compile_selector("(" * 2000 + "a = 1" + ")" * 2000)
    assert compile_selector("a = '" + "(" * 100 + "'").matches({"a": "(" * 100})
    # long flat chains are fine: AND/OR/+ are n-ary, not nested
    flat = " OR ".join(f"a = {i}" for i in range(300))
    assert compile_selector(flat).matches({"a": "299"})


def test_like_patterns_are_bounded():
    half = "x" * (MAX_LIKE_CHARS // 2)
    assert compile_selector(f"a LIKE '{half}' OR b LIKE '{half}'")
    with pytest.raises(InvalidSelector, match="LIKE patterns longer than"):
        compile_selector(f"a LIKE '{half}' OR b LIKE '{half}x'")


def test_like_does_not_backtrack():
    """What compiled to a backtracking regex (``.*a.*a...``) used to take
    exponential time; segment by segment it is one pass per part."""
    match = like_matcher("%a%a%a%a%a%a%a%a%b", None)
    assert not match("a" * 100_000)
    assert match("a" * 100_000 + "b")
    wild = like_matcher("%" + "a_" * 60 + "b%", None)
    assert not wild("a" * 100_000)


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE as a regex, the obvious way (it backtracks; fine for short values)."""
    out, chars = [], iter(pattern)
    for ch in chars:
        if ch == escape:
            out.append(re.escape(next(chars)))
        else:
            out.append({"%": ".*", "_": "."}.get(ch) or re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


@given(
    st.lists(st.sampled_from(["a", "b", "%", "_", "!%", "!_", "!!", "!a"]), max_size=8),
    st.text(alphabet="ab%_!\n", max_size=12),
    st.booleans(),
)
def test_like_agrees_with_a_regex(tokens, value, with_escape):
    pattern = "".join(tokens)
    escape = "!" if with_escape else None
    expected = _like_regex(pattern, escape).fullmatch(value) is not None
    assert like_matcher(pattern, escape)(value) is expected


def test_compiled_once_per_text():
    assert compile_selector("x = 1") is compile_selector("x = 1")
