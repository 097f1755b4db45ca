#!/usr/bin/env python3
"""gen_schemas.py — random JSON Schemas over kvloom's supported keyword subset
(docs/grammar.md, "JSON Schema support"), for the differential test
tests/grammar_diff_test.sh.

  gen_schemas.py SEED N > schemas.jsonl     one schema a line

Deterministic for a seed (random.Random(SEED)). The schemas stay small
(few properties, short arrays, small repetition counts) so that random token
walks over them end; a few are deliberately recursive ($ref to "#" or to a
definition, always through an object or array).
"""
import json
import random
import sys

WORDS = ["id", "name", "a", "b", "ab", "abc", "city", "count", "tags", "x", "é", "ключ", "with space",
         "quo\"te", "k1", "k2", "type", "value", "n", "nn"]
STRINGS = ["", "a", "b", "red", "green", "x y", "é", "日本", "😀", "quo\"te", "back\\slash", "tab\t", "nl\n",
           "\u0001", "/"]
CHARS = ["a", "b", "c", "x", "0", "1", "9", "-", "_", " ", "é", "日", "\\.", "\\d", "\\w", "\\s", "\\-",
         ".", "\"", "\\\\", "\\n", "\\t", "\\u00e9"]
CLASSES = ["[a-c]", "[0-9]", "[^a-z]", "[xyz_]", "[A-Za-z]", "[\\d.]", "[^\"]", "[^\\\\]", "[é-ê]",
           "[^\\s]", "[\\w-]", "[.]", "[ab\\n]"]


class Gen:
    def __init__(self, rng):
        self.r = rng

    def regex(self, depth=0):
        r = self.r

        def atom():
            k = r.random()
            if k < 0.45:
                return r.choice(CHARS)
            if k < 0.75:
                return r.choice(CLASSES)
            if depth < 2:
                inner = self.regex(depth + 1)
                return ("(?:" if r.random() < 0.5 else "(") + inner + ")"
            return r.choice(CHARS)

        def piece():
            a = atom()
            k = r.random()
            if k < 0.5:
                return a
            q = r.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"])
            if q in ("*", "+", "{2,}", "{1,3}", "{0,2}", "{2}") and a.startswith("(") and self.nullable_hint(a):
                q = "?"
            return a + q

        def seq():
            return "".join(piece() for _ in range(r.randint(1, 4)))
        alts = [seq() for _ in range(1 if r.random() < 0.7 else r.randint(2, 3))]
        return "|".join(alts)

    @staticmethod
    def nullable_hint(a):
        # crude: a group whose text has ? * or {0 may be nullable; avoid repeating it
        return any(t in a for t in ("?", "*", "{0", "|)", "(|"))

    def pattern(self):
        r = self.r
        body = self.regex()
        start, end = r.random() < 0.8, r.random() < 0.8
        if (start or end) and "|" in body:
            body = "(" + body + ")"
        return ("^" if start else "") + body + ("$" if end else "")

    def value(self, depth=0):
        r = self.r
        k = r.random()
        if k < 0.25:
            return r.choice(STRINGS)
        if k < 0.45:
            return r.randint(-1000, 1000)
        if k < 0.5:
            return r.choice([0.5, -2.25, 1e-05, 100.0, 3.0, 1e+20, 0.1])
        if k < 0.6:
            return r.choice([True, False, None])
        if depth > 1:
            return r.choice(STRINGS)
        if k < 0.8:
            return [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        return {r.choice(WORDS): self.value(depth + 1) for _ in range(r.randint(0, 3))}

    def leaf(self):
        r = self.r
        k = r.randint(0, 13)
        if k == 0:
            return {"type": "string"}
        if k == 1:
            s = {"type": "string"}
            if r.random() < 0.7:
                s["minLength"] = r.randint(0, 3)
            if r.random() < 0.7:
                s["maxLength"] = s.get("minLength", 0) + r.randint(0, 6)
            return s
        if k == 2:
            return {"type": "string", "pattern": self.pattern()}
        if k == 3:
            return {"type": "string", "format": r.choice(["date", "time", "date-time", "uuid"])}
        if k == 4:
            return {"type": "number"}
        if k == 5:
            return {"type": "integer"}
        if k == 6:
            s = {"type": "integer"}
            lo = r.choice([-1000, -100, -5, -1, 0, 1, 7, 10, 99, 100, 255, 1000, 12345])
            hi = lo + r.choice([0, 1, 9, 10, 90, 255, 1000, 99999])
            kind = r.randint(0, 4)
            if kind == 0:
                s["minimum"] = lo
            elif kind == 1:
                s["maximum"] = hi
            elif kind == 2:
                s["minimum"], s["maximum"] = lo, hi
            elif kind == 3:
                s["exclusiveMinimum"], s["maximum"] = lo - 1, hi
            else:
                s["minimum"], s["exclusiveMaximum"] = lo, hi + 1
            return s
        if k == 7:
            return {"type": "boolean"}
        if k == 8:
            return {"type": "null"}
        if k == 9:
            vals = [self.value() for _ in range(r.randint(1, 5))]
            return {"enum": vals}
        if k == 10:
            return {"const": self.value()}
        if k == 11:
            return {"type": r.sample(["string", "integer", "boolean", "null", "number"], r.randint(2, 3))}
        if k == 12:
            return {"type": "string", "enum": [r.choice(STRINGS) for _ in range(3)] + [1]}
        return {}

    def schema(self, depth=0, defs=None):
        r = self.r
        if depth >= 3 or r.random() < 0.35:
            s = self.leaf()
        else:
            k = r.randint(0, 9)
            if k <= 3:
                s = self.object(depth, defs)
            elif k <= 5:
                s = self.array(depth, defs)
            elif k <= 7:
                kw = r.choice(["anyOf", "oneOf"])
                s = {kw: [self.schema(depth + 1, defs) for _ in range(r.randint(1, 3))]}
            elif k == 8:
                s = {"allOf": [self.schema(depth + 1, defs)]}
            else:
                s = {"$ref": "#/$defs/" + r.choice(sorted(defs))} if defs else self.leaf()
        if r.random() < 0.2 and isinstance(s, dict):
            s[r.choice(["title", "description", "$comment"])] = "annotation"
        return s

    def object(self, depth, defs):
        r = self.r
        names = r.sample(WORDS, r.randint(0, 4))
        s = {"type": "object"} if r.random() < 0.9 else {}
        if names or r.random() < 0.5:
            s["properties"] = {n: self.schema(depth + 1, defs) for n in names}
        if names and r.random() < 0.7:
            s["required"] = r.sample(names, r.randint(0, len(names)))
        k = r.random()
        if k < 0.3:
            s["additionalProperties"] = False
        elif k < 0.45:
            s["additionalProperties"] = True
        elif k < 0.6:
            s["additionalProperties"] = self.leaf()
        if r.random() < 0.05 and names:
            s["properties"][names[0]] = False
            if "required" in s and names[0] in s["required"]:
                s["required"].remove(names[0])
        return s

    def array(self, depth, defs):
        r = self.r
        s = {"type": "array"}
        if r.random() < 0.3:
            s["prefixItems"] = [self.schema(depth + 1, defs) for _ in range(r.randint(1, 3))]
        k = r.random()
        if k < 0.6:
            s["items"] = self.schema(depth + 1, defs)
        elif k < 0.75 and "prefixItems" in s:
            s["items"] = False
        if r.random() < 0.4:
            s["minItems"] = r.randint(0, 2)
        if r.random() < 0.6:
            s["maxItems"] = s.get("minItems", 0) + r.randint(0, 3)
        return s

    def top(self):
        r = self.r
        k = r.random()
        if k < 0.1:
            # recursive: a tree through an array of refs to the root
            return {"type": "object", "properties": {"v": self.leaf(),
                    "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}, "required": ["v"]}
        if k < 0.25:
            defs = {"d%d" % i: self.schema(1) for i in range(r.randint(1, 3))}
            if r.random() < 0.5:
                defs["node"] = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                                "required": ["n", "next"], "additionalProperties": False}
            s = self.schema(0, defs)
            if not isinstance(s, dict):
                s = {"anyOf": [s]}
            key = "$defs"
            if r.random() < 0.3:
                key = "definitions"
                s = json.loads(json.dumps(s).replace("#/$defs/", "#/definitions/"))
                defs = json.loads(json.dumps(defs).replace("#/$defs/", "#/definitions/"))
            if "$ref" in s and len(s) > 1:
                s = {"anyOf": [s]}
            s[key] = defs
            return s
        return self.schema(0)


def main(argv):
    seed, n = int(argv[1]), int(argv[2])
    g = Gen(random.Random(seed))
    for _ in range(n):
        print(json.dumps(g.top(), ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv)
