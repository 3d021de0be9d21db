"""Reads a topic of registry-framed Avro values with Confluent's own Python client
(confluent-kafka's AvroDeserializer, which checks the magic byte, fetches the writer schema by
the id from the registry and decodes the rest with fastavro).

usage: registry_consume_avro.py REGISTRY_URL BOOTSTRAP TOPIC COUNT

Prints each options quote read as one JSON line (ticker, sequence_number, bid_price, ask_size),
sorted by sequence_number, then the schema ids seen.
"""

import json
import sys
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    url, bootstrap, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"weir-registry-check-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows, ids = [], set()
    deadline = time.time() + 60
    while len(rows) < count and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            sys.exit(f"consumer error: {msg.error()}")
        value = msg.value()
        ids.add(int.from_bytes(value[1:5], "big"))
        q = deserialize(value, ctx)
        rows.append({"ticker": q["base"]["ticker"], "sequence_number": q["base"]["sequence_number"],
                     "bid_price": q["bid_price"], "ask_size": q["ask_size"]})
    consumer.close()
    for r in sorted(rows, key=lambda r: r["sequence_number"]):
        print(json.dumps(r, sort_keys=True))
    print("ids", sorted(ids))


main()
