"""Reads a topic that weir's kafka sink wrote in the schema registry's framing, with Confluent's
own Python client (confluent-kafka): its ProtobufDeserializer checks the magic byte, reads the
schema id and the message-index list, and parses the rest as rs.Trade.

usage: registry_consume.py BOOTSTRAP TOPIC COUNT

Prints one line: the messages read, the sum of `seq`, and how many have ticker 'T<seq>' and
price seq / 4.
"""

import sys
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

STRING, INT64, DOUBLE = 9, 3, 1


def trade_class():
    pool = descriptor_pool.DescriptorPool()
    f = descriptor_pb2.FileDescriptorProto(name="rs/trade.proto", package="rs", syntax="proto3")
    f.message_type.add(name="Other").field.add(name="x", number=1, type=INT64, label=1)
    m = f.message_type.add(name="Trade")
    m.field.add(name="ticker", number=1, type=STRING, label=1)
    m.field.add(name="seq", number=2, type=INT64, label=1)
    m.field.add(name="price", number=3, type=DOUBLE, label=1)
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("rs.Trade"))


def main():
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    deserialize = ProtobufDeserializer(trade_class(), {"use.deprecated.format": False})
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"weir-registry-check-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    ctx = SerializationContext(topic, MessageField.VALUE)
    read = total = consistent = 0
    deadline = time.time() + 60
    while read < count and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            sys.exit(f"consumer error: {msg.error()}")
        t = deserialize(msg.value(), ctx)
        read += 1
        total += t.seq
        consistent += t.ticker == f"T{t.seq}" and t.price == t.seq / 4
    consumer.close()
    print(read, total, consistent)


if __name__ == "__main__":
    main()
