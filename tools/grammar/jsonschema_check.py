#!/usr/bin/env python3
"""jsonschema_check.py — an independent checker for kvloom's JSON Schema
subset (src/grammar/schema.c, docs/grammar.md "JSON Schema support").

Written from the JSON Schema semantics and the documented choices, not from
the C code, so that the differential test (tests/grammar_diff_test.sh) can
compare the two:

  validate(schema, value)    the decoded JSON value is valid under the schema
  complete(schema, data)     data (bytes) is a whole document in the canonical
                             layout that is valid under the schema
  prefix(schema, data)       data (bytes, may end inside a UTF-8 sequence) can
                             be continued into such a document

The canonical layout: no whitespace except one space after ':' and ',' in
objects and arrays; object members in schema order (listed properties first,
required ones always; then additional properties, whose keys are written
without escapes and are none of the listed names, when allowed); enum/const
values written with json.dumps(ensure_ascii=False)-style escapes and reals in
their shortest %g form; strings with any escapes (\\uXXXX not a surrogate),
except pattern strings, which use the canonical escapes only; integers
without leading zeros and without "-0"; numbers with at most 15 integer
digits, 15 fraction digits and 3 exponent digits.

Only plain python3 (json, sys) is used. As a script:
  jsonschema_check.py check CASES.jsonl [SCHEMAS.jsonl]
      CASES: one JSON object a line, {"schema": ... or "sid": line number
      in SCHEMAS, "kind": "complete"|"prefix"|"refused"|"notend",
      "hex": "..."}; prints the failures and "N passed, N failed"
  jsonschema_check.py corpus CASES.jsonl SCHEMAS.jsonl
      the corpus test: every case is a complete output of a random walk,
      which must be valid under the full JSON Schema semantics
      (validate_full), skipping the keywords kvloom reported relaxed
"""
import json
import math
import sys

INT_DEFAULT = 10**15 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAXCP = 0x10FFFF

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
               "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict"}

PREFIX = -1  # a match that ran out of input while still possible


class Unsupported(Exception):
    pass


# ---- code point sets: sorted lists of (lo, hi) ----------------------------

def iv_norm(ivs):
    ivs = sorted(ivs)
    out = []
    for a, b in ivs:
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    res = []
    for a, b in out:  # no surrogates
        if b < 0xD800 or a > 0xDFFF:
            res.append((a, b))
        else:
            if a < 0xD800:
                res.append((a, 0xD7FF))
            if b > 0xDFFF:
                res.append((0xE000, b))
    return res


def iv_neg(ivs):
    ivs = iv_norm(ivs)
    out, nxt = [], 0
    for a, b in ivs:
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= MAXCP:
        out.append((nxt, MAXCP))
    return iv_norm(out)


def iv_has(ivs, c):
    for a, b in ivs:
        if a <= c <= b:
            return True
    return False


def iv_meets(x, y):
    for a, b in x:
        for c, d in y:
            if a <= d and c <= b:
                return True
    return False


ANY = iv_norm([(0, MAXCP)])
WS = [(9, 13), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
      (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
CLASS_ESC = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (97, 122), (95, 95)], "s": WS}
DOT = iv_neg([(10, 10), (13, 13), (0x2028, 0x2029)])


# ---- regular expressions: parser and NFA ----------------------------------

class Regex:
    """ECMA-style subset: literals, escapes, ., classes, groups, |, * + ? {m,n};
    ^ only first, $ only last. Unanchored ends match any code points."""

    def __init__(self, pat):
        self.p, self.i = pat, 0
        start = pat.startswith("^")
        if start:
            self.i = 1
        ast = self.alt()
        end = False
        if self.i < len(pat) and pat[self.i] == "$" and self.i == len(pat) - 1:
            end, self.i = True, self.i + 1
        if self.i != len(pat):
            raise Unsupported("pattern: unexpected %r" % pat[self.i])
        if (start or end) and ast[0] == "alt":
            raise Unsupported("pattern: anchor beside top-level |")
        if not start:
            ast = ("cat", ("rep", ("set", ANY), 0, None), ast)
        if not end:
            ast = ("cat", ast, ("rep", ("set", ANY), 0, None))
        self.trans = []  # state -> list of (ivs, target)
        self.eps = []
        s0 = self.new()
        self.accept = self.build(ast, s0)
        self.start = self.closure({s0})

    # parser
    def peek(self):
        return self.p[self.i] if self.i < len(self.p) else None

    def alt(self):
        a = self.cat()
        while self.peek() == "|":
            self.i += 1
            a = ("alt", a, self.cat())
        return a

    def cat(self):
        items = []
        while self.peek() is not None and self.peek() not in "|)":
            if self.peek() == "$" and self.i == len(self.p) - 1:
                break
            items.append(self.rep())
        a = ("empty",)
        for x in items:
            a = ("cat", a, x)
        return a

    def num(self):
        j = self.i
        while self.peek() is not None and self.peek().isdigit() and self.peek() in "0123456789":
            self.i += 1
        return int(self.p[j:self.i]) if self.i > j else None

    def rep(self):
        a = self.atom()
        while True:
            c = self.peek()
            if c == "*":
                mn, mx = 0, None
            elif c == "+":
                mn, mx = 1, None
            elif c == "?":
                mn, mx = 0, 1
            elif c == "{":
                self.i += 1
                mn = self.num()
                if mn is None:
                    raise Unsupported("pattern: bare {")
                mx = mn
                if self.peek() == ",":
                    self.i += 1
                    mx = self.num()
                if self.peek() != "}":
                    raise Unsupported("pattern: bad {m,n}")
                if mx is not None and mx < mn:
                    raise Unsupported("pattern: n < m")
            else:
                return a
            self.i += 1
            if self.peek() == "?":
                self.i += 1
            a = ("rep", a, mn, mx)

    def escape(self):
        c = self.peek()
        if c is None:
            raise Unsupported("pattern: trailing backslash")
        self.i += 1
        if c in "dws":
            return CLASS_ESC[c]
        if c in "DWS":
            return iv_neg(CLASS_ESC[c.lower()])
        simple = {"n": 10, "r": 13, "t": 9, "f": 12, "v": 11, "0": 0}
        if c in simple:
            return [(simple[c], simple[c])]
        if c in "xu":
            n = 2 if c == "x" else 4
            h = self.p[self.i:self.i + n]
            if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                raise Unsupported("pattern: bad hex escape")
            self.i += n
            v = int(h, 16)
            if 0xD800 <= v <= 0xDFFF:
                raise Unsupported("pattern: surrogate")
            return [(v, v)]
        if c.isalnum() and ord(c) < 128:
            raise Unsupported("pattern: escape \\" + c)
        if ord(c) >= 128:
            raise Unsupported("pattern: escaped non-ASCII")
        return [(ord(c), ord(c))]

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise Unsupported("pattern: (?")
            a = self.alt()
            if self.peek() != ")":
                raise Unsupported("pattern: missing )")
            self.i += 1
            return a
        if c == "[":
            self.i += 1
            neg = self.peek() == "^"
            if neg:
                self.i += 1
            ivs, first = [], True
            while True:
                c = self.peek()
                if c is None:
                    raise Unsupported("pattern: unterminated class")
                if c == "]" and not first:
                    self.i += 1
                    break
                first = False
                if c == "\\":
                    self.i += 1
                    e = self.escape()
                    if len(e) != 1 or e[0][0] != e[0][1] or self.p[self.i - 1] in "dwsDWS":
                        ivs += e
                        continue
                    lo = e[0][0]
                else:
                    lo = ord(c)
                    self.i += 1
                if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                    self.i += 1
                    if self.peek() == "\\":
                        self.i += 1
                        e = self.escape()
                        hi = e[0][0]
                    else:
                        hi = ord(self.peek())
                        self.i += 1
                    if hi < lo:
                        raise Unsupported("pattern: range out of order")
                    ivs.append((lo, hi))
                else:
                    ivs.append((lo, lo))
            s = iv_neg(ivs) if neg else iv_norm(ivs)
            if not s:
                raise Unsupported("pattern: empty class")
            return ("set", s)
        if c == ".":
            self.i += 1
            return ("set", DOT)
        if c in ")*+?{|" or c in "^$":
            raise Unsupported("pattern: unexpected %r" % c)
        if c == "\\":
            self.i += 1
            return ("set", iv_norm(self.escape()))
        self.i += 1
        return ("set", iv_norm([(ord(c), ord(c))]))

    # Thompson construction
    def new(self):
        self.trans.append([])
        self.eps.append([])
        return len(self.trans) - 1

    def build(self, a, s):
        """Adds a from state s; returns the end state."""
        k = a[0]
        if k == "empty":
            return s
        if k == "set":
            t = self.new()
            self.trans[s].append((a[1], t))
            return t
        if k == "cat":
            return self.build(a[2], self.build(a[1], s))
        if k == "alt":
            e1, e2 = self.build(a[1], s), self.build(a[2], s)
            t = self.new()
            self.eps[e1].append(t)
            self.eps[e2].append(t)
            return t
        if k == "rep":
            _, x, mn, mx = a
            cur = s
            for _ in range(mn):
                cur = self.build(x, cur)
            if mx is None:
                loop = self.new()
                self.eps[cur].append(loop)
                e = self.build(x, loop)
                self.eps[e].append(loop)
                return loop
            ends = [cur]
            for _ in range(mx - mn):
                cur = self.build(x, cur)
                ends.append(cur)
            t = self.new()
            for e in ends:
                self.eps[e].append(t)
            return t
        raise AssertionError(k)

    def closure(self, states):
        st, seen = list(states), set(states)
        while st:
            x = st.pop()
            for y in self.eps[x]:
                if y not in seen:
                    seen.add(y)
                    st.append(y)
        return frozenset(seen)

    # consumer interface: states are frozensets of NFA states
    def init(self):
        return self.start

    def step(self, st, cp):
        nxt = set()
        for x in st:
            for ivs, t in self.trans[x]:
                if iv_has(ivs, cp):
                    nxt.add(t)
        return self.closure(nxt) if nxt else None

    def step_set(self, st, ivs):
        return any(iv_meets(tv, ivs) for x in st for tv, _ in self.trans[x])

    def accepting(self, st):
        return self.accept in st

    def fullmatch(self, s):
        st = self.init()
        for ch in s:
            st = self.step(st, ord(ch))
            if st is None:
                return False
        return self.accepting(st)


# the date layout (docs/grammar.md): day counts per month, February 29 in leap years
DATE_RX = (r"[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
           r"02-(0[1-9]|1[0-9]|2[0-8]))|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29")
FORMATS = {
    "date": r"^(%s)$" % DATE_RX,
    "time": r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[-+]([01][0-9]|2[0-3]):[0-5][0-9])$",
    "date-time": r"^(%s)T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" % DATE_RX +
                 r"(\.[0-9]{1,9})?(Z|[-+]([01][0-9]|2[0-3]):[0-5][0-9])$",
    "uuid": r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
}
NUMBER_RX = r"^-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?([eE][-+]?[0-9]{1,3})?$"
INTEGER_RX = r"^(0|-?[1-9][0-9]{0,14})$"
_rx_cache = {}


def regex(p):
    r = _rx_cache.get(p)
    if r is None:
        r = _rx_cache[p] = Regex(p)
    return r


class LenConsumer:
    def __init__(self, mn, mx):
        self.mn, self.mx = mn, mx

    def init(self):
        return 0

    def step(self, st, cp):
        return st + 1 if self.mx is None or st + 1 <= self.mx else None

    def step_set(self, st, ivs):
        return bool(ivs) and (self.mx is None or st + 1 <= self.mx)

    def accepting(self, st):
        return st >= self.mn


class IntRange:
    """Canonical integers lo..hi; states are the text so far."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    @staticmethod
    def _exists(d, a, b):  # some m in [a,b] whose decimal form starts with d
        if a > b:
            return False
        if d == "":
            return True
        if d[0] == "0":
            return d == "0" and a <= 0 <= b
        for L in range(len(d), len(str(b)) + 1):
            lo = int(d + "0" * (L - len(d)))
            hi = int(d + "9" * (L - len(d)))
            if max(lo, a) <= min(hi, b):
                return True
        return False

    def ok(self, t):
        if t.startswith("-"):
            if not all(c in "0123456789" for c in t[1:]):
                return False
            if t[1:2] == "0":
                return False
            return self._exists(t[1:], max(1, -self.hi), -self.lo)
        if not all(c in "0123456789" for c in t):
            return False
        return self._exists(t, max(0, self.lo), self.hi)

    def init(self):
        return ""

    def step(self, st, cp):
        t = st + chr(cp)
        return t if self.ok(t) else None

    def step_set(self, st, ivs):
        return False  # digits and '-' are ASCII; partial tails are not

    def accepting(self, st):
        if st in ("", "-") or not self.ok(st):
            return False
        v = int(st)
        return self.lo <= v <= self.hi and str(v) == st


# ---- input: code points, maybe ending in part of a UTF-8 sequence ---------

def decode_input(data):
    """Returns (list of code points, partial ivs or None), or None when the
    bytes are not valid UTF-8 (allowing an incomplete last sequence)."""
    n = len(data)
    cut = n
    # find an incomplete tail
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b & 0xC0 == 0x80:
            continue
        need = 1 if b < 0x80 else 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 0
        if need > back:
            cut = n - back
        break
    try:
        text = data[:cut].decode("utf-8")
    except UnicodeDecodeError:
        return None
    cps = [ord(c) for c in text]
    if cut == n:
        return cps, None
    tail = data[cut:]
    b0 = tail[0]
    need = 2 if b0 & 0xE0 == 0xC0 else 3 if b0 & 0xF0 == 0xE0 else 4
    if any(x & 0xC0 != 0x80 for x in tail[1:]):
        return None

    def val(bs):
        v = bs[0] & (0x1F if need == 2 else 0x0F if need == 3 else 0x07)
        for x in bs[1:]:
            v = (v << 6) | (x & 0x3F)
        return v
    lo = val(list(tail) + [0x80] * (need - len(tail)))
    hi = val(list(tail) + [0xBF] * (need - len(tail)))
    mn = {2: 0x80, 3: 0x800, 4: 0x10000}[need]
    lo, hi = max(lo, mn), min(hi, MAXCP)
    ivs = iv_norm([(lo, hi)]) if lo <= hi else []
    if not ivs:
        return None
    return cps, ivs


class Inp:
    def __init__(self, cps, partial):
        self.s, self.partial, self.n = cps, partial, len(cps)

    def at(self, i):
        """('cp', c) | ('end',) | ('partial', ivs)"""
        if i < self.n:
            return ("cp", self.s[i])
        if self.partial is not None:
            return ("partial", self.partial)
        return ("end",)


# ---- canonical text of values --------------------------------------------

def canon_str(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif o < 0x20:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def canon_real(x):
    for p in range(1, 18):
        s = "%.*g" % (p, x)
        if float(s) == x:
            return s
    return s


def canon(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return canon_real(v)
    if isinstance(v, str):
        return canon_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(canon(x) for x in v) + "]"
    return "{" + ", ".join(canon_str(k) + ": " + canon(x) for k, x in v.items()) + "}"


# ---- schema semantics (shared by validate and the layout matcher) ---------

TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
INFER = {"properties": "object", "required": "object", "additionalProperties": "object",
         "items": "array", "prefixItems": "array", "minItems": "array", "maxItems": "array",
         "minLength": "string", "maxLength": "string", "pattern": "string", "format": "string",
         "minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number"}


def value_types(v):
    if isinstance(v, bool):
        return {"boolean"}
    if v is None:
        return {"null"}
    if isinstance(v, int):
        return {"integer", "number"}
    if isinstance(v, float):
        return {"number"} | ({"integer"} if math.isfinite(v) and v == math.floor(v) else set())
    if isinstance(v, str):
        return {"string"}
    if isinstance(v, list):
        return {"array"}
    return {"object"}


def schema_types(s):
    t = s.get("type")
    if t is not None:
        return set(t) if isinstance(t, list) else {t}
    inf = {INFER[k] for k in s if k in INFER}
    return inf if inf else set(TYPES)


def resolve(root, ref):
    assert ref.startswith("#")
    cur = root
    for tok in ref[1:].split("/")[1:] if ref != "#" else []:
        tok = tok.replace("~1", "/").replace("~0", "~")
        cur = cur[int(tok)] if isinstance(cur, list) else cur[tok]
    return cur


def int_bounds(s):
    """(lo, hi) for an integer schema, or None when unbounded."""
    lo = hi = None

    def upd(cur, x, lower):
        if cur is None:
            return x
        return max(cur, x) if lower else min(cur, x)
    xmin, xmax = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    for kw, lower in (("minimum", True), ("maximum", False), ("exclusiveMinimum", True), ("exclusiveMaximum", False)):
        v = s.get(kw)
        if v is None or isinstance(v, bool):
            continue
        excl = kw.startswith("exclusive") or (kw == "minimum" and xmin is True) or (kw == "maximum" and xmax is True)
        if isinstance(v, int):
            x = v + (1 if lower else -1) if excl else v
        else:
            x = (math.floor(v) + 1 if excl else math.ceil(v)) if lower else (math.ceil(v) - 1 if excl else math.floor(v))
            x = max(INT64_MIN, min(INT64_MAX, int(x)))
        if lower:
            lo = upd(lo, x, True)
        else:
            hi = upd(hi, x, False)
    if lo is None and hi is None:
        return None
    if hi is None:
        hi = INT_DEFAULT if lo <= INT_DEFAULT else INT64_MAX
    if lo is None:
        lo = -INT_DEFAULT if hi >= -INT_DEFAULT else INT64_MIN
    return lo, hi


def enum_values(s):
    vals = []
    if "const" in s:
        if "enum" not in s or any(json_eq(s["const"], x) for x in s["enum"]):
            vals = [s["const"]]
    else:
        for x in s["enum"]:
            if not any(json_eq(x, y) for y in vals):
                vals.append(x)
    if "type" in s:
        ts = schema_types(s)
        vals = [v for v in vals if value_types(v) & ts]
    return vals


def json_eq(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b or (a is None and b is None)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) != type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_eq(a[k], b[k]) for k in a)
    return a == b


def combinator(s):
    for k in ("$ref", "anyOf", "oneOf", "allOf"):
        if k in s:
            return k
    return None


def obj_members(s):
    """[(name, schema, required)], extra_schema (None: no extras), banned names."""
    props = s.get("properties")
    req = s.get("required", [])
    addl = s.get("additionalProperties")
    if addl is None:
        addl = props is None
    members, banned = [], []
    for k, v in (props or {}).items():
        if v is False:
            banned.append(k)
            continue
        members.append((k, v, k in req))
    for r in req:
        if props is not None and r in props:
            continue
        members.append((r, addl if isinstance(addl, dict) else True, True))
    extra = None if addl is False else addl
    return members, extra, banned


# ---- semantic validation ---------------------------------------------------

def validate(schema, v, root=None):
    root = schema if root is None else root
    s = schema
    if s is True:
        return True
    if s is False:
        return False
    c = combinator(s)
    if c == "$ref":
        return validate(resolve(root, s["$ref"]), v, root)
    if c == "allOf":
        return all(validate(x, v, root) for x in s["allOf"])
    if c in ("anyOf", "oneOf"):
        return any(validate(x, v, root) for x in s[c])  # oneOf: treated as anyOf (documented)
    if "enum" in s or "const" in s:
        return any(json_eq(v, x) for x in enum_values(s))
    ts = schema_types(s)
    vt = value_types(v)
    if not (vt & ts):
        return False
    if "string" in vt:
        if "pattern" in s and not regex(s["pattern"]).fullmatch(v):
            return False
        if "format" in s and not regex(FORMATS[s["format"]]).fullmatch(v):
            return False
        if len(v) < s.get("minLength", 0) or ("maxLength" in s and len(v) > s["maxLength"]):
            return False
    if "integer" in vt and "number" not in ts:
        b = int_bounds(s)
        lo, hi = b if b else (-INT_DEFAULT, INT_DEFAULT)
        if not (lo <= v <= hi):
            return False
    if "number" in vt and "number" in ts:
        pass  # bounds on numbers are unsupported; digit limits are a layout matter
    if "object" in vt:
        members, extra, banned = obj_members(s)
        names = {m[0] for m in members}
        for name, sub, req in members:
            if req and name not in v:
                return False
            if name in v and not validate(sub, v[name], root):
                return False
        for k in v:
            if k in names:
                continue
            if k in banned or extra is None or not validate(extra, v[k], root):
                return False
    if "array" in vt:
        pre = s.get("prefixItems", [])
        items = s.get("items", True)
        if len(v) < s.get("minItems", 0) or ("maxItems" in s and len(v) > s["maxItems"]):
            return False
        for i, x in enumerate(v):
            sub = pre[i] if i < len(pre) else items
            if not validate(sub, x, root):
                return False
    return True


# ---- the canonical layout: a nondeterministic matcher ----------------------
# m_*(..., inp, i) yield end positions j, or PREFIX when the input ended
# inside and the text so far can still be continued.

def m_lit(inp, i, text):
    for k, ch in enumerate(text):
        x = inp.at(i + k)
        if x[0] == "end":
            yield PREFIX
            return
        if x[0] == "partial":
            if iv_has(x[1], ord(ch)):
                yield PREFIX
            return
        if x[1] != ord(ch):
            return
    yield i + len(text)


def m_raw(inp, i, cons):
    """A token over raw code points (numbers, integers): every end where
    `cons` accepts."""
    st = cons.init()
    j = i
    while True:
        if cons.accepting(st):
            yield j
        x = inp.at(j)
        if x[0] == "end":
            yield PREFIX
            return
        if x[0] == "partial":
            if cons.step_set(st, x[1]):
                yield PREFIX
            return
        st = cons.step(st, x[1])
        if st is None:
            return
        j += 1


HEX = "0123456789abcdefABCDEF"
RAW_OK = iv_neg([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
SHORT = {'"': 0x22, "\\": 0x5C, "/": 0x2F, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9}
CANON_SHORT = {'"': 0x22, "\\": 0x5C, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9}
CANON_U = [c for c in range(0x20) if c not in (8, 9, 10, 12, 13)]


def jchar(inp, i, canonical, keymode=False):
    """One char of a string body: ('quote', j) | ('char', cp, j) |
    ('partial', ivs) | ('bad',)."""
    x = inp.at(i)
    if x[0] == "end":
        return ("partial", ANY if not keymode else RAW_OK)
    if x[0] == "partial":
        ivs = [iv for iv in x[1]]  # non-ASCII: always raw-allowed
        return ("partial", ivs)
    c = x[1]
    if c == 0x22:
        return ("quote", i + 1)
    if c < 0x20:
        return ("bad",)
    if c != 0x5C:
        return ("char", c, i + 1)
    if keymode:
        return ("bad",)
    # an escape
    table = CANON_SHORT if canonical else SHORT
    x = inp.at(i + 1)
    if x[0] != "cp":
        if x[0] == "partial":
            return ("bad",)
        ivs = [(v, v) for v in table.values()]
        ivs += [(c, c) for c in CANON_U] if canonical else [(0, 0xD7FF), (0xE000, 0xFFFF)]
        return ("partial", iv_norm(ivs))
    e = chr(x[1])
    if e in table:
        return ("char", table[e], i + 2)
    if e != "u":
        return ("bad",)
    digits = ""
    for k in range(4):
        y = inp.at(i + 2 + k)
        if y[0] != "cp":
            if y[0] == "partial":
                return ("bad",)
            # the possible values with this hex prefix
            cands = []
            if canonical:
                cands = [v for v in CANON_U if ("%04x" % v).startswith(digits)]
                return ("partial", iv_norm([(v, v) for v in cands])) if cands else ("bad",)
            lo = int(digits + "0" * (4 - len(digits)), 16) if digits else 0
            hi = int(digits + "f" * (4 - len(digits)), 16) if digits else 0xFFFF
            ivs = iv_norm([(lo, hi)])
            return ("partial", ivs) if ivs else ("bad",)
        ch = chr(y[1])
        if ch not in HEX or (canonical and ch in "ABCDEF"):
            return ("bad",)
        digits += ch
    v = int(digits, 16)
    if 0xD800 <= v <= 0xDFFF:
        return ("bad",)
    if canonical and v not in CANON_U:
        return ("bad",)
    return ("char", v, i + 6)


def m_string(inp, i, cons, canonical, keymode=False, names=None):
    """A JSON string whose decoded content `cons` accepts; with keymode, no
    escapes and the key is none of `names`."""
    for j in m_lit(inp, i, '"'):
        if j == PREFIX:
            yield PREFIX
            return
        st = cons.init() if cons else None
        dec = []
        while True:
            r = jchar(inp, j, canonical, keymode)
            if r[0] == "bad":
                return
            if r[0] == "partial":
                ivs = r[1] if not keymode else [iv for iv in r[1]]
                if keymode:
                    ivs = [(a, b) for a, b in ivs]
                    # any raw char, or the closing quote, can continue a key
                    yield PREFIX
                    return
                if inp.at(j)[0] == "end":
                    yield PREFIX  # the closing quote or any char may follow
                    return
                if cons is None or cons.step_set(st, ivs):
                    yield PREFIX
                return
            if r[0] == "quote":
                if keymode:
                    if "".join(dec) not in names:
                        yield r[1]
                    return
                if cons is None or cons.accepting(st):
                    yield r[1]
                return
            if cons is not None:
                st = cons.step(st, r[1])
                if st is None:
                    return
            dec.append(chr(r[1]))
            j = r[2]


def m_value(inp, i, root):
    """Any JSON value (the schema true)."""
    return m_schema(True, inp, i, root)


def m_object_generic(inp, i, root, value_schema):
    """{"key": value, ...} with any keys (full strings), values under value_schema."""
    def members(j, first):
        yield from m_lit(inp, j, "}")
        for k in m_lit(inp, j, "" if first else ", "):
            if k == PREFIX:
                yield PREFIX
                continue
            for k2 in m_string(inp, k, None, False):
                if k2 == PREFIX:
                    yield PREFIX
                    continue
                for k3 in m_lit(inp, k2, ": "):
                    if k3 == PREFIX:
                        yield PREFIX
                        continue
                    for k4 in m_schema(value_schema, inp, k3, root):
                        if k4 == PREFIX:
                            yield PREFIX
                        else:
                            yield from members(k4, False)
    for j in m_lit(inp, i, "{"):
        if j == PREFIX:
            yield PREFIX
        else:
            yield from members(j, True)


def m_object(s, inp, i, root):
    members, extra, banned = obj_members(s)
    if not members and not banned:
        if extra is None:
            yield from m_lit(inp, i, "{}")
        else:
            yield from m_object_generic(inp, i, root, extra)
        return
    names = {m[0] for m in members} | set(banned)

    def one(j, sep, key_part, sub):
        for k in m_lit(inp, j, sep):
            if k == PREFIX:
                yield PREFIX
                continue
            for k2 in key_part(k):
                if k2 == PREFIX:
                    yield PREFIX
                    continue
                for k3 in m_lit(inp, k2, ": "):
                    if k3 == PREFIX:
                        yield PREFIX
                        continue
                    yield from m_schema(sub, inp, k3, root)

    def listed(idx, first, j):
        if idx == len(members):
            yield from extras(first, j)
            return
        name, sub, req = members[idx]
        if not req:
            yield from listed(idx + 1, first, j)
        for k in one(j, "" if first else ", ", lambda a: m_lit(inp, a, canon_str(name)), sub):
            if k == PREFIX:
                yield PREFIX
            else:
                yield from listed(idx + 1, False, k)

    def extras(first, j):
        yield from m_lit(inp, j, "}")
        if extra is None:
            return
        for k in one(j, "" if first else ", ", lambda a: m_string(inp, a, None, False, True, names), extra):
            if k == PREFIX:
                yield PREFIX
            else:
                yield from extras(False, k)

    for j in m_lit(inp, i, "{"):
        if j == PREFIX:
            yield PREFIX
        else:
            yield from listed(0, True, j)


def m_array(s, inp, i, root):
    pre = s.get("prefixItems", [])
    items = s.get("items", True)
    mn = s.get("minItems", 0)
    mx = s.get("maxItems")
    if items is False:
        mx = len(pre) if mx is None else min(mx, len(pre))

    def elems(n, j):
        if n >= mn:
            yield from m_lit(inp, j, "]")
        if mx is not None and n >= mx:
            return
        sub = pre[n] if n < len(pre) else items
        for k in m_lit(inp, j, ", " if n else ""):
            if k == PREFIX:
                yield PREFIX
                continue
            for k2 in m_schema(sub, inp, k, root):
                if k2 == PREFIX:
                    yield PREFIX
                else:
                    yield from elems(n + 1, k2)

    for j in m_lit(inp, i, "["):
        if j == PREFIX:
            yield PREFIX
        else:
            yield from elems(0, j)


def m_schema(s, inp, i, root):
    if s is True or s == {} or (isinstance(s, dict) and all(k in ANNOTATIONS for k in s)):
        s = {"type": list(TYPES)}
    c = combinator(s)
    if c == "$ref":
        yield from m_schema(resolve(root, s["$ref"]), inp, i, root)
        return
    if c == "allOf":
        yield from m_schema(s["allOf"][0], inp, i, root)
        return
    if c:
        for x in s[c]:
            if x is not False:
                yield from m_schema(x, inp, i, root)
        return
    if "enum" in s or "const" in s:
        for v in enum_values(s):
            yield from m_lit(inp, i, canon(v))
        return
    ts = schema_types(s)
    if "number" in ts:
        ts = ts - {"integer"}
    for t in TYPES:
        if t not in ts:
            continue
        if t == "string":
            if "pattern" in s:
                yield from m_string(inp, i, regex(s["pattern"]), True)
            elif "format" in s:
                yield from m_string(inp, i, regex(FORMATS[s["format"]]), True)
            else:
                mx = s.get("maxLength")
                mn = s.get("minLength", 0)
                yield from m_string(inp, i, LenConsumer(mn, mx), False)
        elif t == "number":
            yield from m_raw(inp, i, regex(NUMBER_RX))
        elif t == "integer":
            b = int_bounds(s)
            yield from m_raw(inp, i, IntRange(*b) if b else regex(INTEGER_RX))
        elif t == "boolean":
            yield from m_lit(inp, i, "true")
            yield from m_lit(inp, i, "false")
        elif t == "null":
            yield from m_lit(inp, i, "null")
        elif t == "object":
            yield from m_object(s, inp, i, root)
        elif t == "array":
            yield from m_array(s, inp, i, root)


def _run(schema, data):
    d = decode_input(data)
    if d is None:
        return None
    inp = Inp(*d)
    return inp, m_schema(schema, inp, 0, schema)


def complete(schema, data):
    """data (bytes) is a whole valid document in the canonical layout."""
    r = _run(schema, data)
    if r is None or r[0].partial is not None:
        return False
    inp, gen = r
    return any(j == inp.n for j in gen)


def prefix(schema, data):
    """data (bytes) can be continued into a valid canonical document."""
    r = _run(schema, data)
    if r is None:
        return False
    inp, gen = r
    return any(j == PREFIX or (j == inp.n and inp.partial is None) for j in gen)


def document_ok(schema, data):
    """complete() and, independently, json.loads + validate()."""
    if not complete(schema, data):
        return False, "not a complete canonical document"
    try:
        v = json.loads(data.decode("utf-8"))
    except Exception as ex:  # noqa: BLE001
        return False, "json.loads: %s" % ex
    if not validate(schema, v):
        return False, "decoded value does not validate"
    return True, ""


# ---- full validation (the corpus test, tests/schema_corpus_test.sh) --------
# JSON Schema 2020-12 and draft-07 semantics, written from the specification
# (not from schema.c): every keyword applies, allOf/anyOf/oneOf/not/if are
# evaluated as such, formats are checked by their RFCs with the standard
# library. Numbers are compared exactly (decimal.Decimal): values are read
# with parse_float=Decimal and real bounds are taken as the shortest decimal
# that reads back as the same double (repr). Keywords kvloom reported as
# relaxed for a schema are skipped wherever they appear. Where kvloom's
# documented layout choices are stricter than the specification (no extra
# members when additionalProperties is absent), the specification is used:
# a stricter grammar still produces valid values. oneOf is checked as
# anyOf only when kvloom reported it relaxed.

import decimal
import ipaddress
import re as _re

D = decimal.Decimal
decimal.getcontext().prec = 200


def num(x):
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return D(x)
    if isinstance(x, float):
        return D(repr(x)) if math.isfinite(x) else None
    if isinstance(x, D):
        return x
    return None


def full_types(v):
    if isinstance(v, bool):
        return {"boolean"}
    if v is None:
        return {"null"}
    n = num(v)
    if n is not None:
        return {"number", "integer"} if n == n.to_integral_value() else {"number"}
    if isinstance(v, str):
        return {"string"}
    if isinstance(v, list):
        return {"array"}
    return {"object"}


def full_eq(a, b):
    na, nb = num(a), num(b)
    if na is not None and nb is not None:
        return na == nb
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if type(a) != type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(full_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(full_eq(a[k], b[k]) for k in a)
    return a == b


_ECMA_CLASS = {r"\d": "0-9", r"\w": "A-Za-z0-9_"}


def ecma_search(pat, s):
    """ECMA-262 search (what JSON Schema's pattern means), by Python's re:
    \\d and \\w are ASCII there, and $ must not match before a final newline."""
    p = pat.replace(r"\d", "[0-9]").replace(r"\w", "[A-Za-z0-9_]").replace(r"\D", "[^0-9]")
    p = p.replace(r"\W", "[^A-Za-z0-9_]")
    if p.endswith("$") and not p.endswith(r"\$"):
        p = p[:-1] + r"\Z"
    try:
        return _re.search(p, s) is not None
    except _re.error:
        return regex(pat).fullmatch(s)


def leap(y):
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def f_date(s):
    m = _re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", s, _re.ASCII)
    if not m:
        return False
    y, mo, d = (int(x) for x in m.groups())
    if not 1 <= mo <= 12:
        return False
    days = [31, 29 if leap(y) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]
    return 1 <= d <= days


def f_time(s):
    m = _re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))", s, _re.ASCII)
    if not m:
        return False
    h, mi, se = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if m.group(6) and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return h <= 23 and mi <= 59 and se <= 60


def f_datetime(s):
    m = _re.fullmatch(r"([^Tt]*)[Tt](.*)", s, _re.S)
    return bool(m) and f_date(m.group(1)) and f_time(m.group(2))


def f_duration(s):
    # RFC 3339 appendix A
    t = r"T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S)"
    return _re.fullmatch(r"P((\d+Y(\d+M(\d+D)?)?|\d+M(\d+D)?|\d+D)(%s)?|%s|\d+W)" % (t, t), s, _re.ASCII) is not None


def f_hostname(s):
    if not s or len(s) > 253:
        return False
    return all(_re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", x, _re.ASCII) for x in s.split("."))


def f_email(s):
    # RFC 5321/5322: dot-atom local part (at most 64) "@" a hostname
    if "@" not in s:
        return False
    local, dom = s.rsplit("@", 1)
    atext = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
    return (len(local) <= 64 and _re.fullmatch(r"%s(\.%s)*" % (atext, atext), local, _re.ASCII) is not None
            and f_hostname(dom))


def f_ipv4(s):
    try:
        ipaddress.IPv4Address(s)
        return True
    except ValueError:
        return False


def f_ipv6(s):
    if "%" in s:
        return False
    try:
        ipaddress.IPv6Address(s)
        return True
    except ValueError:
        return False


# RFC 3986 appendix A
_U = r"[A-Za-z0-9\-._~]"
_PCT = r"%[0-9A-Fa-f]{2}"
_SUB = r"[!$&'()*+,;=]"
_PCHAR = r"(?:%s|%s|%s|[:@])" % (_U, _PCT, _SUB)
_AUTH = r"(?:(?:%s|%s|%s|:)*@)?(?:\[[0-9A-Fa-f:.]+\]|(?:%s|%s|%s)*)(?::[0-9]*)?" % (_U, _PCT, _SUB, _U, _PCT, _SUB)
_PATHS = r"(?://%s(?:/%s*)*|/(?:%s+(?:/%s*)*)?|%s+(?:/%s*)*|)" % (_AUTH, _PCHAR, _PCHAR, _PCHAR, _PCHAR, _PCHAR)
_QF = r"(?:\?(?:%s|[/?])*)?(?:#(?:%s|[/?])*)?" % (_PCHAR, _PCHAR)
_URI = r"[A-Za-z][A-Za-z0-9+.\-]*:" + _PATHS + _QF
_NC = r"(?:%s|%s|%s|@)" % (_U, _PCT, _SUB)
_REL = r"(?://%s(?:/%s*)*|/(?:%s+(?:/%s*)*)?|%s+(?:/%s*)*|)" % (_AUTH, _PCHAR, _PCHAR, _PCHAR, _NC, _PCHAR) + _QF


def f_uri(s):
    return _re.fullmatch(_URI, s) is not None


def f_uriref(s):
    return _re.fullmatch(_URI, s) is not None or _re.fullmatch(_REL, s) is not None


def f_jptr(s):
    return _re.fullmatch(r"(/([^~/]|~[01])*)*", s, _re.S) is not None


def f_reljptr(s):
    m = _re.fullmatch(r"(0|[1-9][0-9]*)(#|.*)", s, _re.S)
    return bool(m) and (m.group(2) == "#" or f_jptr(m.group(2)))


def f_uuid(s):
    return _re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s) is not None


FULL_FORMATS = {"date": f_date, "time": f_time, "date-time": f_datetime, "duration": f_duration,
                "hostname": f_hostname, "idn-hostname": f_hostname, "email": f_email, "idn-email": f_email,
                "ipv4": f_ipv4, "ipv6": f_ipv6, "uri": f_uri, "iri": f_uri, "uri-reference": f_uriref,
                "iri-reference": f_uriref, "json-pointer": f_jptr, "relative-json-pointer": f_reljptr,
                "uuid": f_uuid}


def find_anchor(v, name):
    if isinstance(v, dict):
        if v.get("$anchor") == name or v.get("$dynamicAnchor") == name:
            return v
        for k, x in v.items():
            if k in ("enum", "const", "default", "examples"):
                continue
            r = find_anchor(x, name)
            if r is not None:
                return r
    elif isinstance(v, list):
        for x in v:
            r = find_anchor(x, name)
            if r is not None:
                return r
    return None


def full_resolve(root, ref):
    if ref.startswith("#") and len(ref) > 1 and ref[1] != "/":
        return find_anchor(root, ref[1:])
    return resolve(root, ref)


def validate_full(s, v, root, skip, depth=0):
    """v (decoded, reals as Decimal) is valid under schema s; keywords in
    `skip` are ignored."""
    if depth > 200:
        raise RecursionError("schema recursion")
    if s is True or s == {}:
        return True
    if s is False:
        return False

    def on(k):
        return k in s and k not in skip
    for rk in ("$ref", "$recursiveRef", "$dynamicRef"):
        if on(rk) and not validate_full(full_resolve(root, s[rk]), v, root, skip, depth + 1):
            return False
    if on("allOf") and not all(validate_full(x, v, root, skip, depth + 1) for x in s["allOf"]):
        return False
    if on("anyOf") and not any(validate_full(x, v, root, skip, depth + 1) for x in s["anyOf"]):
        return False
    if on("oneOf") and sum(1 for x in s["oneOf"] if validate_full(x, v, root, skip, depth + 1)) != 1:
        return False
    if on("not") and validate_full(s["not"], v, root, skip, depth + 1):
        return False
    if on("if") and ("then" in s or "else" in s):
        branch = "then" if validate_full(s["if"], v, root, skip, depth + 1) else "else"
        if branch in s and not validate_full(s[branch], v, root, skip, depth + 1):
            return False
    vt = full_types(v)
    if on("type"):
        ts = set(s["type"]) if isinstance(s["type"], list) else {s["type"]}
        if s.get("nullable") is True and "nullable" not in skip:
            ts.add("null")
        if not (vt & ts):
            return False
    if on("enum") and not any(full_eq(v, x) for x in s["enum"]):
        return False
    if on("const") and not full_eq(v, s["const"]):
        return False
    n = num(v)
    if n is not None:
        for k, ok in (("minimum", lambda b: n >= b), ("maximum", lambda b: n <= b),
                      ("exclusiveMinimum", lambda b: n > b), ("exclusiveMaximum", lambda b: n < b)):
            if on(k) and not isinstance(s[k], bool):
                b = num(s[k])
                if k == "minimum" and s.get("exclusiveMinimum") is True:
                    ok = (lambda b: n > b)  # draft 4
                if k == "maximum" and s.get("exclusiveMaximum") is True:
                    ok = (lambda b: n < b)
                if not ok(b):
                    return False
        if on("multipleOf") and (n / num(s["multipleOf"])) != (n / num(s["multipleOf"])).to_integral_value():
            return False
    if isinstance(v, str):
        ln = len(v)
        if on("minLength") and ln < s["minLength"]:
            return False
        if on("maxLength") and ln > s["maxLength"]:
            return False
        if on("pattern") and not ecma_search(s["pattern"], v):
            return False
        if on("format") and s["format"] in FULL_FORMATS and not FULL_FORMATS[s["format"]](v):
            return False
    if isinstance(v, dict):
        if on("required") and any(r not in v for r in s["required"]):
            return False
        if on("minProperties") and len(v) < s["minProperties"]:
            return False
        if on("maxProperties") and len(v) > s["maxProperties"]:
            return False
        props = s.get("properties", {}) if on("properties") else {}
        pats = s.get("patternProperties", {}) if on("patternProperties") else {}
        for k, x in v.items():
            matched = False
            if k in props:
                matched = True
                if not validate_full(props[k], x, root, skip, depth + 1):
                    return False
            for pk, ps in pats.items():
                if ecma_search(pk, k):
                    matched = True
                    if not validate_full(ps, x, root, skip, depth + 1):
                        return False
            if not matched:
                for ak in ("additionalProperties", "unevaluatedProperties"):
                    if on(ak) and not validate_full(s[ak], x, root, skip, depth + 1):
                        return False
            if on("propertyNames") and not validate_full(s["propertyNames"], k, root, skip, depth + 1):
                return False
        dreq = dict(s.get("dependentRequired", {})) if on("dependentRequired") else {}
        dsch = dict(s.get("dependentSchemas", {})) if on("dependentSchemas") else {}
        for k, x in (s.get("dependencies", {}) if on("dependencies") else {}).items():
            (dreq if isinstance(x, list) else dsch)[k] = x
        for k, names in dreq.items():
            if k in v and any(nm not in v for nm in names):
                return False
        for k, sub in dsch.items():
            if k in v and not validate_full(sub, v, root, skip, depth + 1):
                return False
    if isinstance(v, list):
        if on("minItems") and len(v) < s["minItems"]:
            return False
        if on("maxItems") and len(v) > s["maxItems"]:
            return False
        items = s.get("items") if on("items") else None
        if isinstance(items, list):
            pre, rest = items, s.get("additionalItems") if on("additionalItems") else None
        else:
            pre, rest = (s.get("prefixItems", []) if on("prefixItems") else []), items
        if rest is None and on("unevaluatedItems"):
            rest = s["unevaluatedItems"]
        for i, x in enumerate(v):
            sub = pre[i] if i < len(pre) else rest
            if sub is not None and not validate_full(sub, x, root, skip, depth + 1):
                return False
        if on("contains"):
            c = sum(1 for x in v if validate_full(s["contains"], x, root, skip, depth + 1))
            lo = s.get("minContains", 1) if "minContains" not in skip else 1
            if c < lo or ("maxContains" in s and "maxContains" not in skip and c > s["maxContains"]):
                return False
        if on("uniqueItems") and s["uniqueItems"]:
            for i in range(len(v)):
                for j in range(i):
                    if full_eq(v[i], v[j]):
                        return False
    return True


def corpus_check(cases_path, schemas_path):
    """Cases {"sid", "kind": "valid", "hex", "skip": [keywords]}: the bytes
    are one JSON value, valid under the schema without the skipped
    keywords."""
    schemas = [json.loads(x) for x in open(schemas_path, encoding="utf-8") if x.strip()]
    passed = failed = shown = 0
    for line in open(cases_path, encoding="utf-8"):
        if not line.strip():
            continue
        c = json.loads(line)
        sch = schemas[c["sid"]]
        sch = sch.get("schema", sch) if isinstance(sch, dict) and "origin" in sch else sch
        data = bytes.fromhex(c["hex"])
        why = ""
        try:
            v = json.loads(data.decode("utf-8"), parse_float=D)
            ok = validate_full(sch, v, sch, set(c.get("skip", [])))
            why = "does not validate"
        except Exception as ex:  # noqa: BLE001
            ok, why = False, "%s: %s" % (type(ex).__name__, ex)
        if ok:
            passed += 1
        else:
            failed += 1
            if shown < 20:
                shown += 1
                print("FAIL sid %d: %s (skip %s)\n  schema %s\n  text %r" % (c["sid"], why, c.get("skip", []),
                                                                           json.dumps(sch)[:600], data[:400]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "corpus":
        return corpus_check(argv[2], argv[3])
    if len(argv) < 3 or argv[1] != "check":
        print(__doc__)
        return 2
    passed = failed = 0
    shown = 0
    schemas = []
    if len(argv) > 3:
        schemas = [json.loads(x) for x in open(argv[3], encoding="utf-8") if x.strip()]
    for line in open(argv[2], encoding="utf-8"):
        if not line.strip():
            continue
        c = json.loads(line)
        schema = schemas[c["sid"]] if "sid" in c else c["schema"]
        data = bytes.fromhex(c["hex"])
        kind = c["kind"]
        if kind == "complete":
            ok, why = document_ok(schema, data)
        elif kind == "prefix":
            ok, why = prefix(schema, data), "not a valid prefix"
        elif kind == "refused":
            ok, why = not prefix(schema, data), "refused, yet a valid prefix"
        elif kind == "notend":
            ok, why = not complete(schema, data), "end refused, yet complete"
        else:
            ok, why = False, "unknown kind " + kind
        if ok:
            passed += 1
        else:
            failed += 1
            if shown < 20:
                shown += 1
                print("FAIL %s: %s\n  schema %s\n  text %r" % (kind, why, json.dumps(schema), data))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
