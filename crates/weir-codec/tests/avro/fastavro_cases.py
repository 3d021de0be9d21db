"""Random Avro schemas and records, written by fastavro, for weir's differential test.

Usage: fastavro_cases.py OUT_DIR SEED SCHEMAS RECORDS

For each schema i, writes to OUT_DIR:
  i.avsc        the schema (JSON)
  i.bin         the records, each as fastavro's schemaless (binary) encoding, each preceded by
                its length as 4 big-endian bytes
  i.jsonl       the records as JSON, one per line, in the form the test builds from Arrow:
                bytes and fixed as hex, decimals as their unscaled integer in a string, dates,
                times and timestamps as integers (days, or units of the logical type), maps as
                lists of [key, value] pairs in written order
  i.meta        the parsing canonical form (line 1) and the CRC-64-AVRO fingerprint as
                little-endian hex (line 2), as fastavro computes them
  i.avro        the same records as an object container file, in blocks of about 512 bytes,
                compressed with null, deflate, snappy or zstandard (by i, in turn)
"""

import io
import json
import os
import random
import struct
import sys
import decimal
from decimal import Decimal

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

CODECS = ["null", "deflate", "snappy", "zstandard"]

PRIMS = ["boolean", "int", "long", "float", "double", "string", "bytes"]
LOGICAL = [
    ("int", "date"),
    ("int", "time-millis"),
    ("long", "time-micros"),
    ("long", "timestamp-millis"),
    ("long", "timestamp-micros"),
    ("long", "timestamp-nanos"),
    ("long", "local-timestamp-millis"),
    ("long", "local-timestamp-micros"),
    ("long", "local-timestamp-nanos"),
    ("string", "uuid"),
]


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.n = 0

    def name(self, kind):
        self.n += 1
        return f"{kind}{self.n}"

    def schema(self, depth):
        r = self.rng.random()
        if depth >= 3 or r < 0.35:
            return self.rng.choice(PRIMS)
        if r < 0.50:
            base, logical = self.rng.choice(LOGICAL)
            return {"type": base, "logicalType": logical}
        if r < 0.56:
            # Decimal128 up to 38 digits, Decimal256 past them.
            precision = self.rng.randint(1, 76)
            scale = self.rng.randint(0, precision)
            if self.rng.random() < 0.5:
                return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
            size = 16 if precision <= 38 else 32
            return {"type": "fixed", "name": self.name("Dec"), "size": size,
                    "logicalType": "decimal", "precision": precision, "scale": scale}
        if r < 0.62:
            return {"type": "enum", "name": self.name("E"),
                    "symbols": [f"S{i}" for i in range(self.rng.randint(1, 5))]}
        if r < 0.67:
            return {"type": "fixed", "name": self.name("F"), "size": self.rng.randint(1, 20)}
        if r < 0.75:
            return {"type": "array", "items": self.schema(depth + 1)}
        if r < 0.82:
            return {"type": "map", "values": self.schema(depth + 1)}
        if r < 0.92:
            inner = self.schema(depth + 1)
            if isinstance(inner, list):
                return inner
            return ["null", inner] if self.rng.random() < 0.7 else [inner, "null"]
        return self.record(depth + 1)

    def record(self, depth):
        fields = []
        for i in range(self.rng.randint(1, 6 if depth else 10)):
            fields.append({"name": f"f{i}", "type": self.schema(depth)})
        return {"type": "record", "name": self.name("R"), "fields": fields}

    def value(self, s):
        """(value for fastavro, expected JSON)."""
        rng = self.rng
        if isinstance(s, list):
            if rng.random() < 0.3:
                return None, None
            inner = next(b for b in s if b != "null")
            return self.value(inner)
        if isinstance(s, dict):
            t = s["type"]
            lt = s.get("logicalType")
            if lt == "decimal":
                p = s["precision"]
                unscaled = rng.randint(-(10**p) + 1, 10**p - 1)
                return Decimal(unscaled).scaleb(-s["scale"]), str(unscaled)
            if lt == "uuid":
                u = "%08x-%04x-%04x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 16, 16, 48))
                return u, u
            if lt is not None:
                if t == "int":
                    v = rng.randint(0, 86_400_000 - 1) if lt == "time-millis" else rng.randint(-100000, 100000)
                else:
                    v = rng.randint(0, 86_400_000_000 - 1) if lt == "time-micros" else rng.randint(-(2**62), 2**62)
                return v, v
            if t == "record":
                out, exp = {}, {}
                for f in s["fields"]:
                    out[f["name"]], exp[f["name"]] = self.value(f["type"])
                return out, exp
            if t == "enum":
                v = rng.choice(s["symbols"])
                return v, v
            if t == "fixed":
                b = bytes(rng.getrandbits(8) for _ in range(s["size"]))
                return b, b.hex()
            if t == "array":
                vals = [self.value(s["items"]) for _ in range(rng.randint(0, 4))]
                return [v for v, _ in vals], [e for _, e in vals]
            if t == "map":
                keys = [f"k{rng.randint(0, 999)}" for _ in range(rng.randint(0, 4))]
                keys = list(dict.fromkeys(keys))
                vals = {k: self.value(s["values"]) for k in keys}
                return {k: v for k, (v, _) in vals.items()}, [[k, e] for k, (_, e) in vals.items()]
            return self.value(t)
        if s == "boolean":
            v = rng.random() < 0.5
            return v, v
        if s == "int":
            v = rng.choice([0, -1, 1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)])
            return v, v
        if s == "long":
            v = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)])
            return v, v
        if s == "float":
            # Exactly representable in 32 bits, so the comparison is exact.
            v = rng.randint(-(2**23), 2**23) / 2 ** rng.randint(0, 10)
            return v, v
        if s == "double":
            v = rng.uniform(-1e300, 1e300) if rng.random() < 0.5 else rng.random()
            return v, v
        if s == "string":
            alphabet = "abcxyz \u00e9\u4e2d\U0001F600\"\\"
            v = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            return v, v
        if s == "bytes":
            b = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 12)))
            return b, b.hex()
        raise ValueError(s)


def main():
    # Decimals of up to 76 digits, exactly (the default context rounds to 28).
    decimal.getcontext().prec = 80
    out, seed, schemas, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for i in range(schemas):
        g = Gen(rng)
        schema = g.record(0)
        parsed = parse_schema(schema)
        with open(os.path.join(out, f"{i}.avsc"), "w") as f:
            json.dump(schema, f)
        canonical = to_parsing_canonical_form(parsed)
        with open(os.path.join(out, f"{i}.meta"), "w") as f:
            f.write(canonical + "\n" + fingerprint(canonical, "CRC-64-AVRO") + "\n")
        values = []
        with open(os.path.join(out, f"{i}.bin"), "wb") as bf, open(os.path.join(out, f"{i}.jsonl"), "w") as jf:
            for _ in range(records):
                value, expected = g.value(schema)
                values.append(value)
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, parsed, value)
                data = buf.getvalue()
                bf.write(struct.pack(">I", len(data)) + data)
                jf.write(json.dumps(expected) + "\n")
        codec = CODECS[i % len(CODECS)]
        with open(os.path.join(out, f"{i}.avro"), "wb") as cf:
            fastavro.writer(cf, parsed, values, codec=codec, sync_interval=512)


if __name__ == "__main__":
    main()
