"""Avro object container files written (or appended to) by fastavro, for weir's file connector
tests.

Usage: avro_files.py write PATH SCHEMA CODEC FIRST COUNT
       avro_files.py append PATH FIRST COUNT
       avro_files.py quotes PATH     (prints the codec, the records and the sum of their
                                      base.sequence_number and bid_size of a quotes file)

SCHEMA is v0, v1 or v2 (below). Record i has id i, name "n{i % 100}", amount i / 2, kind "A"
when i % 3 == 0 else "B", and (v2) note "note{i}" for odd i, else null. Blocks hold about
4 KiB, so a file of a few thousand records has dozens of blocks.
"""

import sys

import fastavro

KIND = {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}

SCHEMAS = {
    # An older writer: an int id (promoted to long), a float amount (promoted to double) and
    # the enum's symbols in another order (resolved by name).
    "v0": {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "float"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["B", "A"]}},
        ],
    },
    "v1": {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "kind", "type": KIND},
        ],
    },
    # A newer writer: one more field, with a default.
    "v2": {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "kind", "type": KIND},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    },
}


def records(first, count, with_note):
    for i in range(first, first + count):
        r = {"id": i, "name": f"n{i % 100}", "amount": i / 2, "kind": "A" if i % 3 == 0 else "B"}
        if with_note:
            r["note"] = f"note{i}" if i % 2 else None
        yield r


def main():
    if sys.argv[1] == "write":
        path, name, codec, first, count = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
        schema = fastavro.parse_schema(SCHEMAS[name])
        with open(path, "wb") as f:
            fastavro.writer(f, schema, records(first, count, name == "v2"), codec=codec, sync_interval=4096)
    elif sys.argv[1] == "append":
        path, first, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        with open(path, "a+b") as f:
            f.seek(0)
            header = fastavro.reader(f).writer_schema
            f.seek(0, 2)
            with_note = any(x["name"] == "note" for x in header["fields"])
            fastavro.writer(f, None, records(first, count, with_note), sync_interval=4096)
    elif sys.argv[1] == "quotes":
        with open(sys.argv[2], "rb") as f:
            r = fastavro.reader(f)
            n = seq = size = 0
            for q in r:
                n += 1
                seq += q["base"]["sequence_number"]
                size += q["bid_size"]
            print(r.codec, n, seq, size)
    else:
        sys.exit(f"unknown command {sys.argv[1]}")


if __name__ == "__main__":
    main()
