"""Produces registry-framed protobuf quotes with Confluent's own Python client (confluent-kafka):
its ProtobufSerializer registers each schema version and its import as subjects (the import
under its file name, the schema as a base64 FileDescriptorProto, as that client does) and frames
each message with the schema id and the message-index list.

usage: registry_produce.py REGISTRY_URL BOOTSTRAP TOPIC

Two versions of wt.Quote: v1 (size int32, venue) and v2 (a Heartbeat message first, so the
index list is [1]; size int64, halted). Three messages, on partition 0: v1 AAA, v2 BBB, v1 CCC.
"""

import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

STRING, INT32, INT64, DOUBLE, BOOL, MESSAGE = 9, 5, 3, 1, 8, 11


def quote_class(version):
    pool = descriptor_pool.DescriptorPool()
    base = descriptor_pb2.FileDescriptorProto(name="wt/base.proto", package="wt", syntax="proto3")
    base.message_type.add(name="Base").field.add(name="ticker", number=1, type=STRING, label=1)
    pool.Add(base)
    quote = descriptor_pb2.FileDescriptorProto(
        name="wt/quote.proto", package="wt", syntax="proto3", dependency=["wt/base.proto"]
    )
    if version == 2:
        quote.message_type.add(name="Heartbeat").field.add(name="at", number=1, type=INT64, label=1)
    m = quote.message_type.add(name="Quote")
    m.field.add(name="base", number=1, type=MESSAGE, type_name=".wt.Base", label=1)
    m.field.add(name="size", number=2, type=INT32 if version == 1 else INT64, label=1)
    m.field.add(name="bid", number=3, type=DOUBLE, label=1)
    if version == 1:
        m.field.add(name="venue", number=4, type=STRING, label=1)
    else:
        m.field.add(name="halted", number=6, type=BOOL, label=1)
    pool.Add(quote)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("wt.Quote"))


def main():
    url, bootstrap, topic = sys.argv[1:4]
    registry = SchemaRegistryClient({"url": url})
    classes = {v: quote_class(v) for v in (1, 2)}
    serializers = {v: ProtobufSerializer(c, registry, {"use.deprecated.format": False}) for v, c in classes.items()}
    producer = Producer({"bootstrap.servers": bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for version, ticker, size, extra in [
        (1, "AAA", 7, {"venue": "XNAS"}),
        (2, "BBB", 1 << 40, {"halted": True}),
        (1, "CCC", 9, {"venue": "XNYS"}),
    ]:
        q = classes[version](size=size, bid=1.5, **extra)
        q.base.ticker = ticker
        producer.produce(topic, value=serializers[version](q, ctx), partition=0)
    if producer.flush(30) != 0:
        sys.exit("messages left unsent")


if __name__ == "__main__":
    main()
