"""Produces registry-framed Avro orders with Confluent's own Python client (confluent-kafka's
AvroSerializer, which registers each schema version under the topic's subject and frames each
message with the magic byte and the schema id).

usage: registry_produce_avro.py REGISTRY_URL BOOTSTRAP TOPIC

Two versions of wt.Order: v1 (qty int, a decimal amount, a timestamp-millis) and v2 (qty long,
a nullable note, a map of tags). Three messages, on partition 0: v1 A, v2 B, v1 C.
"""

import datetime
import decimal
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

AMOUNT = {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2}
AT = {"type": "long", "logicalType": "timestamp-millis"}
V1 = {"type": "record", "name": "Order", "namespace": "wt", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "amount", "type": AMOUNT}, {"name": "at", "type": AT}]}
V2 = {"type": "record", "name": "Order", "namespace": "wt", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "long"},
    {"name": "amount", "type": AMOUNT}, {"name": "at", "type": AT},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}}]}


def main():
    url, bootstrap, topic = sys.argv[1:4]
    registry = SchemaRegistryClient({"url": url})
    serializers = {v: AvroSerializer(registry, json.dumps(s)) for v, s in ((1, V1), (2, V2))}
    producer = Producer({"bootstrap.servers": bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    at = datetime.datetime(2026, 3, 2, 14, 30, 0, 123000, tzinfo=datetime.timezone.utc)
    for version, order in [
        (1, {"id": "A", "qty": 7, "amount": decimal.Decimal("12.34"), "at": at}),
        (2, {"id": "B", "qty": 1 << 40, "amount": decimal.Decimal("-0.05"), "at": at,
             "note": "rush", "tags": {"desk": "x"}}),
        (1, {"id": "C", "qty": 9, "amount": decimal.Decimal("1000000.00"), "at": at}),
    ]:
        producer.produce(topic, value=serializers[version](order, ctx), partition=0)
    if producer.flush(30) != 0:
        sys.exit("messages left unsent")


if __name__ == "__main__":
    main()
