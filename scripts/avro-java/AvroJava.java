// The Java implementation of Avro (org.apache.avro) for weir's tests; scripts/avro_java.sh fetches
// it. Run with `java -cp 'LIB/*' AvroJava.java COMMAND ...` (Java 17 or later):
//
// rewrite DIR SCHEMAS
//   For each schema i, reads DIR/i.avro (fastavro's container file) with Java's generic reader
//   and writes the same records back with Java's writers:
//     i.java.avro  an object container file from DataFileWriter, compressed with deflate, snappy,
//                  zstandard or null (by i, in turn), in small blocks
//     i.java.bin   each record alone, written by BlockingBinaryEncoder, which writes arrays and
//                  maps as blocks with a negative count and a byte size (fastavro never does),
//                  each preceded by its length as 4 big-endian bytes
//   The generic reader keeps logical types as their underlying values (and here maps in their
//   written order), so Java writes exactly the values fastavro wrote.
//
// quotes FILE
//   Reads a container file of options quotes (`weir gen --format avro --framing avro-container`)
//   and prints its codec, the number of quotes, the sum of base.sequence_number and of bid_size.

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;

import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.avro.file.DataFileReader;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

public class AvroJava {
    /** The generic reader, with maps kept in the order they were written (the test compares it). */
    static class OrderedReader extends GenericDatumReader<Object> {
        @Override
        protected Object newMap(Object old, int size) {
            return new LinkedHashMap<>(size);
        }
    }

    public static void main(String[] args) throws Exception {
        // The fast reader builds its own maps, in hash order; the classic one calls newMap.
        GenericData.get().setFastReaderEnabled(false);
        switch (args[0]) {
            case "rewrite" -> rewrite(new File(args[1]), Integer.parseInt(args[2]));
            case "quotes" -> quotes(new File(args[1]));
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    static void quotes(File path) throws Exception {
        try (DataFileReader<Object> reader = new DataFileReader<>(path, new GenericDatumReader<>())) {
            String codec = reader.getMetaString("avro.codec");
            long n = 0, seq = 0, size = 0;
            for (Object q : reader) {
                GenericRecord quote = (GenericRecord) q;
                GenericRecord base = (GenericRecord) quote.get("base");
                n++;
                seq += ((Number) base.get("sequence_number")).longValue();
                size += ((Number) quote.get("bid_size")).longValue();
            }
            System.out.println((codec == null ? "null" : codec) + " " + n + " " + seq + " " + size);
        }
    }

    static void rewrite(File dir, int schemas) throws Exception {
        CodecFactory[] codecs = {
            CodecFactory.deflateCodec(6),
            CodecFactory.snappyCodec(),
            CodecFactory.zstandardCodec(3),
            CodecFactory.nullCodec(),
        };
        for (int i = 0; i < schemas; i++) {
            Schema schema;
            List<Object> records = new ArrayList<>();
            try (DataFileReader<Object> reader =
                    new DataFileReader<>(new File(dir, i + ".avro"), new OrderedReader())) {
                schema = reader.getSchema();
                for (Object r : reader) {
                    records.add(r);
                }
            }
            GenericDatumWriter<Object> datumWriter = new GenericDatumWriter<>(schema);
            try (DataFileWriter<Object> file = new DataFileWriter<>(datumWriter)) {
                file.setCodec(codecs[i % codecs.length]);
                // The smallest interval Java allows: many blocks from a few records.
                file.setSyncInterval(32);
                file.create(schema, new File(dir, i + ".java.avro"));
                for (Object r : records) {
                    file.append(r);
                }
            }
            try (DataOutputStream bin =
                    new DataOutputStream(new FileOutputStream(new File(dir, i + ".java.bin")))) {
                ByteArrayOutputStream one = new ByteArrayOutputStream();
                // A small block buffer: arrays and maps longer than it are split into blocks.
                EncoderFactory factory = new EncoderFactory().configureBlockSize(64);
                BinaryEncoder encoder = null;
                for (Object r : records) {
                    one.reset();
                    encoder = factory.blockingBinaryEncoder(one, encoder);
                    datumWriter.write(r, encoder);
                    encoder.flush();
                    bin.writeInt(one.size());
                    one.writeTo(bin);
                }
            }
        }
    }
}
