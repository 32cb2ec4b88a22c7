"""JMS message selectors over STOMP headers (the SUBSCRIBE ``selector`` header).

The syntax is the JMS one that ActiveMQ and Artemis accept on STOMP:
comparisons (``= <> < > <= >=``), ``AND``/``OR``/``NOT``, parentheses,
``[NOT] LIKE 'p%' [ESCAPE '!']``, ``[NOT] IN ('a', 'b')``,
``[NOT] BETWEEN x AND y``, ``IS [NOT] NULL``, string, numeric and boolean
literals and ``+ - * /``. Keywords are case-insensitive, header names are
not. Logic is SQL's three-valued one: a missing header is NULL, anything
compared with NULL is unknown, and a message matches only when the selector
is TRUE.

Headers are strings on STOMP. As in ActiveMQ, a header whose value is an
integer or decimal compares numerically with a number (``price > 10``
matches ``price:100``, not ``price:9``), and ``true``/``false`` compare with
a boolean literal; two strings compare as strings.

The text is parsed once by a Lark LALR grammar and compiled into a tree of
closures (no tree walking per message); :func:`compile_selector` caches by
text, so the many consumers that share a selector share one evaluator.
Selectors longer than :data:`MAX_SELECTOR_CHARS`, nested deeper than
:data:`MAX_SELECTOR_DEPTH` (parentheses count) or with LIKE patterns longer
than :data:`MAX_LIKE_CHARS` together are refused, and what one message costs
is bounded: LIKE matches without backtracking (at most pattern x value steps),
a header value longer than :data:`MAX_NUMBER_CHARS` is never a number, and an
integer result past 64 bits becomes a double (as Java's arithmetic has no
larger integers), so no selector can stall the broker on one message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, Tree
from lark.exceptions import LarkError, VisitError

from shoal.errors import InvalidSelector

MAX_SELECTOR_CHARS = 4096
MAX_SELECTOR_DEPTH = 64
MAX_LIKE_CHARS = 256  # all LIKE patterns of one selector together
MAX_NUMBER_CHARS = 256  # longer header values are not numbers
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

Headers = Mapping[str, str]
Value = Any  # None (NULL / unknown), bool, int, float or str
Eval = Callable[[Headers], Value]

_GRAMMAR = r"""
?start: or_test
?or_test: and_test (_OR and_test)*
?and_test: not_test (_AND not_test)*
?not_test: NOT not_test                                -> not_
         | predicate
?predicate: sum COMP_OP sum                            -> compare
          | sum [NOT] _BETWEEN sum _AND sum            -> between
          | sum [NOT] _IN "(" STRING ("," STRING)* ")" -> in_
          | sum [NOT] _LIKE STRING [_ESCAPE STRING]    -> like
          | sum _IS [NOT] _NULL                        -> is_null
          | sum
?sum: product (ADD_OP product)*
?product: unary (MUL_OP unary)*
?unary: ADD_OP unary                                   -> sign
      | atom
?atom: STRING                                          -> string
     | DECIMAL                                         -> decimal
     | INTEGER                                         -> integer
     | HEX                                             -> hexint
     | TRUE                                            -> true
     | FALSE                                           -> false
     | IDENT                                           -> ident
     | "(" or_test ")"

_OR: "or"i
_AND: "and"i
NOT: "not"i
_BETWEEN: "between"i
_IN: "in"i
_LIKE: "like"i
_ESCAPE: "escape"i
_IS: "is"i
_NULL: "null"i
TRUE: "true"i
FALSE: "false"i
COMP_OP: "=" | "<>" | "<=" | ">=" | "<" | ">"
ADD_OP: "+" | "-"
MUL_OP: "*" | "/"
STRING: /'(?:[^']|'')*'/
HEX: /0[xX][0-9a-fA-F]+[lL]?/
DECIMAL.2: /(\d+\.\d*|\.\d+)([eE][+-]?\d+)?[fFdD]?/ | /\d+[eE][+-]?\d+[fFdD]?/ | /\d+[fFdD]/
INTEGER: /\d+[lL]?/
IDENT: /[A-Za-z_$][A-Za-z0-9_$.]*/

%import common.WS
%ignore WS
"""

# JMS header names that have a STOMP header of another name (as ActiveMQ maps them).
_JMS_NAMES = {
    "JMSType": "type",
    "JMSCorrelationID": "correlation-id",
    "JMSMessageID": "message-id",
    "JMSTimestamp": "timestamp",
    "JMSExpiration": "expires",
    "JMSReplyTo": "reply-to",
}

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")

_parser: Lark | None = None


def _lark() -> Lark:
    global _parser  # built on first use: most brokers never see a selector
    if _parser is None:
        _parser = Lark(_GRAMMAR, parser="lalr", maybe_placeholders=True)
    return _parser


# -- value conversions (never raise) -----------------------------------------------


def _to_num(v: Value) -> Value:
    if v.__class__ is str:
        if len(v) > MAX_NUMBER_CHARS:  # parsing digits costs their count squared
            return None
        if v.isdigit() and v.isascii():  # the usual case, without a regex
            try:
                return int(v)
            except ValueError:  # past Python's int digit limit
                return None
        if _INT.fullmatch(v):
            try:
                return int(v)
            except ValueError:  # past Python's int digit limit
                return None
        if _NUMBER.fullmatch(v):
            return float(v)
        return None
    if v.__class__ is bool:
        return None
    return v


def _to_bool(v: Value) -> Value:
    if v.__class__ is bool:
        return v
    if v.__class__ is str:
        low = v.lower()
        if low == "true":
            return True
        if low == "false":
            return False
    return None


def _align(a: Value, b: Value) -> tuple[Value, Value]:
    """Bring two non-NULL operands to one kind, or (None, None) when impossible."""
    ka, kb = a.__class__, b.__class__
    if ka is kb:
        return a, b
    if ka is str:
        return (_to_bool(a), b) if kb is bool else (_to_num(a), b)
    if kb is str:
        return (a, _to_bool(b)) if ka is bool else (a, _to_num(b))
    if ka is bool or kb is bool:
        return None, None
    return a, b  # int and float


def _compare(op: str, a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    a, b = _align(a, b)
    if a is None or b is None:
        return None
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if a.__class__ is bool:
        return None  # booleans are only equal or not (JMS)
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def _long_or_double(v: Value) -> Value:
    """An integer past 64 bits as a double, so a chain of products cannot grow
    without bound (OverflowError past a double's range: unknown)."""
    if v.__class__ is int and not _LONG_MIN <= v <= _LONG_MAX:
        return float(v)
    return v


def _arith(op: str, a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    a, b = _to_num(a), _to_num(b)
    if a is None or b is None:
        return None
    try:
        if op == "+":
            return _long_or_double(a + b)
        if op == "-":
            return _long_or_double(a - b)
        if op == "*":
            return _long_or_double(a * b)
        if not b:
            return None  # division by zero is unknown, not an error
        if a.__class__ is int and b.__class__ is int:
            q = abs(a) // abs(b)  # Java's integer division truncates toward zero
            return q if (a < 0) == (b < 0) else -q
        return a / b
    except (ArithmeticError, ValueError):
        return None


# -- compiling the parse tree into closures ---------------------------------------------

# Static kinds, to refuse selectors that cannot be boolean (e.g. ``price + 1``).
BOOL, NUM, STR, ANY = "boolean", "numeric", "string", "any"


_NOT_LITERAL = object()


class _Node:
    __slots__ = ("const", "fn", "kind", "name", "plain")

    def __init__(
        self, fn: Eval, kind: str, *, const: Value = _NOT_LITERAL, name: str | None = None
    ) -> None:
        self.fn = fn
        self.kind = kind
        self.const = const  # the value of a literal, else _NOT_LITERAL
        self.name = name  # the header an identifier reads
        self.plain = False  # fn is just ``h.get(name)``


def _literal(value: Value, kind: str) -> _Node:
    return _Node(lambda h: value, kind, const=value)


def _string_text(tok: Token) -> str:
    return tok[1:-1].replace("''", "'")


def _need_bool(n: _Node, where: str) -> None:
    if n.kind not in (BOOL, ANY):
        raise ValueError(f"{where} needs a boolean operand, got a {n.kind} expression")


class _Compile(Transformer[Token, _Node]):
    def __init__(self) -> None:
        super().__init__()
        self.like_chars = 0  # of all LIKE patterns so far

    # literals and identifiers

    def string(self, c: list[Token]) -> _Node:
        return _literal(_string_text(c[0]), STR)

    def integer(self, c: list[Token]) -> _Node:
        return _literal(int(c[0].rstrip("lL")), NUM)

    def hexint(self, c: list[Token]) -> _Node:
        return _literal(int(c[0].rstrip("lL"), 16), NUM)

    def decimal(self, c: list[Token]) -> _Node:
        return _literal(float(c[0].rstrip("fFdD")), NUM)

    def true(self, c: list[Token]) -> _Node:
        return _literal(True, BOOL)

    def false(self, c: list[Token]) -> _Node:
        return _literal(False, BOOL)

    def ident(self, c: list[Token]) -> _Node:
        name = str(c[0])
        if name == "JMSPriority":
            return _Node(lambda h: h.get("priority", "4"), ANY, name="priority")
        if name == "JMSDeliveryMode":

            def mode(h: Headers) -> str:
                return "PERSISTENT" if h.get("persistent") == "true" else "NON_PERSISTENT"

            return _Node(mode, ANY, name=name)
        key = _JMS_NAMES.get(name, name)

        def header(h: Headers) -> Value:
            return h.get(key)

        n = _Node(header, ANY, name=key)
        n.plain = True
        return n

    # arithmetic

    def sign(self, c: list[Any]) -> _Node:
        n: _Node
        op, n = str(c[0]), c[1]
        if n.kind not in (NUM, ANY):
            raise ValueError(f"unary {op} needs a numeric operand")
        if op == "+":
            return n
        if n.const is not _NOT_LITERAL:
            return _literal(-n.const, NUM)
        f = n.fn
        return _Node(lambda h: _arith("-", 0, f(h)), NUM)

    def _chain(self, c: list[Any]) -> _Node:
        first = c[0]
        steps = [(str(c[i]), c[i + 1]) for i in range(1, len(c), 2)]
        for n in (first, *(n for _, n in steps)):
            if n.kind not in (NUM, ANY):
                raise ValueError(f"arithmetic needs numeric operands, got a {n.kind} expression")
        f0 = first.fn
        ops = [(op, n.fn) for op, n in steps]

        def arith(h: Headers) -> Value:
            v = f0(h)
            for op, f in ops:
                v = _arith(op, v, f(h))
            return v

        return _Node(arith, NUM)

    sum = _chain
    product = _chain

    # predicates

    def compare(self, c: list[Any]) -> _Node:
        left, op, right = c[0], str(c[1]), c[2]
        if left.kind == BOOL and right.kind == BOOL and op not in ("=", "<>"):
            raise ValueError(f"booleans cannot be compared with {op}")
        if right.const is not _NOT_LITERAL and left.name is not None:
            return self._compare_const(left, op, right.const)
        lf, rf = left.fn, right.fn
        return _Node(lambda h: _compare(op, lf(h), rf(h)), BOOL)

    @staticmethod
    def _compare_const(left: _Node, op: str, k: Value) -> _Node:
        """``header op literal``: the usual shape, with the literal's kind fixed."""
        lf = left.fn
        name = left.name
        if k.__class__ is str and op == "=":
            if left.plain:

                def eq_str_plain(h: Headers) -> Value:
                    v = h.get(name)  # type: ignore[arg-type]
                    return None if v is None else v == k

                return _Node(eq_str_plain, BOOL)

            def eq_str(h: Headers) -> Value:
                v = lf(h)
                return None if v is None else v == k

            return _Node(eq_str, BOOL)
        if k.__class__ in (int, float) and op in (">", "<", ">=", "<="):
            cmp = {">": k.__lt__, "<": k.__gt__, ">=": k.__le__, "<=": k.__ge__}[op]

            get = (lambda h: h.get(name)) if left.plain else lf

            def num_cmp(h: Headers) -> Value:
                v = get(h)
                if v is None:
                    return None
                v = _to_num(v)
                if v is None:
                    return None
                r = cmp(v)
                return None if r is NotImplemented else r

            return _Node(num_cmp, BOOL)
        return _Node(lambda h: _compare(op, lf(h), k), BOOL)

    def between(self, c: list[Any]) -> _Node:
        e, neg, lo, hi = c[0], c[1] is not None, c[2].fn, c[3].fn
        f = e.fn

        def between(h: Headers) -> Value:
            v = f(h)
            if v is None:
                return None
            a = _compare(">=", v, lo(h))
            b = _compare("<=", v, hi(h))
            r = _and2(a, b)
            return r if r is None or not neg else not r

        return _Node(between, BOOL)

    def in_(self, c: list[Any]) -> _Node:
        e, neg = c[0], c[1] is not None
        values = frozenset(_string_text(t) for t in c[2:])
        f = e.fn

        def in_(h: Headers) -> Value:
            v = f(h)
            if v is None or v.__class__ is not str:
                return None
            return (v in values) is not neg

        return _Node(in_, BOOL)

    def like(self, c: list[Any]) -> _Node:
        e, neg, pat, esc = c[0], c[1] is not None, _string_text(c[2]), c[3]
        self.like_chars += len(pat)
        if self.like_chars > MAX_LIKE_CHARS:
            raise ValueError(f"LIKE patterns longer than {MAX_LIKE_CHARS} characters in all")
        match = like_matcher(pat, None if esc is None else _string_text(esc))
        f = e.fn

        def like(h: Headers) -> Value:
            v = f(h)
            if v is None or v.__class__ is not str:
                return None
            return match(v) is not neg

        return _Node(like, BOOL)

    def is_null(self, c: list[Any]) -> _Node:
        e, neg = c[0], c[1] is not None
        f = e.fn
        if neg:
            return _Node(lambda h: f(h) is not None, BOOL)
        return _Node(lambda h: f(h) is None, BOOL)

    # logic

    def not_(self, c: list[Any]) -> _Node:
        n = c[1]
        _need_bool(n, "NOT")
        f = n.fn

        def not_(h: Headers) -> Value:
            v = _to_bool(f(h))
            return None if v is None else not v

        return _Node(not_, BOOL)

    def and_test(self, c: list[_Node]) -> _Node:
        for n in c:
            _need_bool(n, "AND")
        fns = tuple(n.fn for n in c)

        def and_(h: Headers) -> Value:
            unknown = False
            for f in fns:
                v = _to_bool(f(h))
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True

        return _Node(and_, BOOL)

    def or_test(self, c: list[_Node]) -> _Node:
        for n in c:
            _need_bool(n, "OR")
        fns = tuple(n.fn for n in c)

        def or_(h: Headers) -> Value:
            unknown = False
            for f in fns:
                v = _to_bool(f(h))
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False

        return _Node(or_, BOOL)


def _and2(a: Value, b: Value) -> Value:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


# A part of a LIKE pattern between two ``%``, and its length in characters:
# plain text, or a fixed-length regex of literals and ``.`` where it holds a ``_``.
_Segment = tuple[str | re.Pattern[str], int]


def _like_segments(pattern: str, escape: str | None) -> list[_Segment]:
    if escape is not None and len(escape) != 1:
        raise ValueError(f"ESCAPE must be one character, got {escape!r}")
    segments: list[_Segment] = []
    source: list[str] = []  # the current part as regex source
    text: list[str] = []  # its literal characters
    length = 0
    i = 0
    while i <= len(pattern):
        ch = pattern[i] if i < len(pattern) else "%"  # a % closes the last part
        if escape is not None and ch == escape and i < len(pattern):
            i += 1
            if i == len(pattern):
                raise ValueError("LIKE pattern ends with its escape character")
            source.append(re.escape(pattern[i]))
            text.append(pattern[i])
            length += 1
        elif ch == "%":
            if len(text) == length:
                segments.append(("".join(text), length))
            else:
                segments.append((re.compile("".join(source), re.DOTALL), length))
            source, text, length = [], [], 0
        else:
            source.append("." if ch == "_" else re.escape(ch))
            if ch != "_":
                text.append(ch)
            length += 1
        i += 1
    return segments


def _starts_at(segment: str | re.Pattern[str], value: str, pos: int) -> bool:
    if isinstance(segment, str):
        return value.startswith(segment, pos)
    return segment.match(value, pos) is not None


def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A LIKE test without backtracking: the first part must start the value,
    the last must end it, and each one between is found leftmost after the
    one before (``%`` takes whatever lies between, so leftmost is never
    wrong). A part is found by ``str.find`` or a fixed-length regex: at most
    len(pattern) x len(value) steps."""
    segments = _like_segments(pattern, escape)
    first, first_len = segments[0]
    if len(segments) == 1:  # no %: the whole value, character for character
        return lambda v: len(v) == first_len and _starts_at(first, v, 0)
    last, last_len = segments[-1]
    middle = segments[1:-1]

    def like(value: str) -> bool:
        end = len(value) - last_len  # where the last part must start
        if end < first_len or not _starts_at(first, value, 0):
            return False
        if not _starts_at(last, value, end):
            return False
        pos = first_len
        for segment, length in middle:
            if isinstance(segment, str):
                found = value.find(segment, pos, end)
            else:
                m = segment.search(value, pos, end)
                found = -1 if m is None else m.start()
            if found < 0:
                return False
            pos = found + length
        return True

    return like


def _depth(tree: Tree[Token]) -> int:
    """Nesting depth, without recursion (the Transformer recurses per level)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(node, Tree):
            stack.extend((ch, d + 1) for ch in node.children)
    return deepest


def _paren_depth(text: str) -> int:
    """How deep parentheses nest outside string literals (the grammar drops
    them from the tree, so _depth cannot see them)."""
    deepest = depth = 0
    for i, part in enumerate(text.split("'")):
        if i % 2:  # inside a literal (an escaped '' leaves an empty part: parity holds)
            continue
        for ch in part:
            if ch == "(":
                depth += 1
                deepest = max(deepest, depth)
            elif ch == ")":
                depth -= 1
    return deepest


class Selector:
    """A compiled selector: ``matches(headers)`` is True only when it evaluates to TRUE."""

    __slots__ = ("matches", "text")

    def __init__(self, text: str, fn: Eval) -> None:
        self.text = text

        def matches(headers: Headers) -> bool:
            try:
                return fn(headers) is True
            except (ArithmeticError, ValueError, TypeError):  # a safety net; never expected
                return False

        self.matches = matches

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


@lru_cache(maxsize=4096)
def compile_selector(text: str) -> Selector:
    """Parse and compile ``text``; raise InvalidSelector naming the problem."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise InvalidSelector(text, f"longer than {MAX_SELECTOR_CHARS} characters")
    if not text.strip():
        raise InvalidSelector(text, "empty")
    try:
        tree = _lark().parse(text)
    except LarkError as exc:
        raise InvalidSelector(text, _syntax_reason(exc)) from None
    if _depth(tree) > MAX_SELECTOR_DEPTH or _paren_depth(text) > MAX_SELECTOR_DEPTH:
        raise InvalidSelector(text, f"nested deeper than {MAX_SELECTOR_DEPTH} levels")
    if isinstance(tree, Token):  # a single atom that the grammar inlined
        tree = Tree("start", [tree])
    try:
        out: Any = _Compile().transform(tree)
    except VisitError as exc:
        raise InvalidSelector(text, str(exc.orig_exc)) from None
    if isinstance(out, Tree):  # the wrapper of a single atom
        out = out.children[0]
    node: _Node = out
    if node.kind not in (BOOL, ANY):
        raise InvalidSelector(text, f"a selector must be a boolean expression, not {node.kind}")
    fn = node.fn
    if node.kind == ANY:  # a bare header: 'true' / 'false'

        def fn(h: Headers, f: Eval = node.fn) -> Value:
            return _to_bool(f(h))

    return Selector(text, fn)


def _syntax_reason(exc: LarkError) -> str:
    col = getattr(exc, "column", None)
    tok = getattr(exc, "token", None)
    if tok is not None and getattr(tok, "type", None) == "$END":
        return "syntax error: unexpected end of the selector"
    if tok is not None and col is not None:
        return f"syntax error at column {col} near {str(tok)!r}"
    char = getattr(exc, "char", None)
    if char is not None and col is not None:
        return f"syntax error at column {col}: unexpected {char!r}"
    return "syntax error"
