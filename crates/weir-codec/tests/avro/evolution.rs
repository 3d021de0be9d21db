//! Registry-framed Avro: messages of several writer schemas (schema ids) read into the same
//! declared columns, in message order, with the specification's resolution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir_codec::{
    AvroDecoderOptions, AvroPlan, AvroPlanSource, AvroSchema, ColumnSpec, DataType, Decoder,
    FramedAvroDecoder, SchemaIdError,
};

use super::{bytes, long, row_json};

const V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"item","type":"string"}]}"#;
// Version 2: `id` widened to long, `qty` added, fields reordered.
const V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"qty","type":["null","int"],"default":null},
    {"name":"item","type":"string"},{"name":"id","type":"long"}]}"#;
// Version 3: `item` became a number, which the Utf8 column cannot hold.
const V3: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},{"name":"item","type":"double"}]}"#;

struct Schemas {
    columns: Vec<ColumnSpec>,
    by_id: HashMap<u32, &'static str>,
    asked: Mutex<Vec<u32>>,
}

impl AvroPlanSource for Schemas {
    fn plan(&self, id: u32) -> Result<Arc<AvroPlan>, SchemaIdError> {
        self.asked.lock().unwrap().push(id);
        let text = self
            .by_id
            .get(&id)
            .ok_or_else(|| SchemaIdError::unavailable(id, "test", "not registered"))?;
        let schema = AvroSchema::parse(text).unwrap();
        let reader = AvroSchema::parse(V2).unwrap();
        Ok(Arc::new(AvroPlan::compile(
            &schema,
            Some(&reader),
            id,
            &self.columns,
            false,
            AvroDecoderOptions::default(),
        )?))
    }
}

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(body);
    m
}

#[test]
fn schema_ids_interleave_in_message_order() {
    let columns = vec![
        ColumnSpec::new("id", DataType::Int64),
        ColumnSpec::new("item", DataType::Utf8),
        ColumnSpec::new("qty", DataType::Int32),
    ];
    let source = Arc::new(Schemas {
        columns: columns.clone(),
        by_id: HashMap::from([(1, V1), (2, V2), (3, V3)]),
        asked: Mutex::default(),
    });
    let reference = source.plan(2).unwrap();
    let mut d = FramedAvroDecoder::new(source.clone(), reference, 100);
    let v1 = |id: i64, item: &[u8]| {
        let mut b = Vec::new();
        long(&mut b, id);
        bytes(&mut b, item);
        framed(1, &b)
    };
    let v2 = |qty: Option<i64>, item: &[u8], id: i64| {
        let mut b = Vec::new();
        match qty {
            Some(q) => {
                long(&mut b, 1);
                long(&mut b, q);
            }
            None => long(&mut b, 0),
        }
        bytes(&mut b, item);
        long(&mut b, id);
        framed(2, &b)
    };
    for m in [
        v1(1, b"a"),
        v2(Some(5), b"b", 1 << 40),
        v1(3, b"c"),
        v2(None, b"d", 4),
    ] {
        d.decode(&m).unwrap();
    }
    // Version 3 cannot be read into the columns: the message fails, naming the column.
    let mut b = Vec::new();
    long(&mut b, 9);
    b.extend_from_slice(&1.5f64.to_le_bytes());
    let e = d.decode(&framed(3, &b)).unwrap_err().to_string();
    assert!(
        e.contains("schema id 3") && e.contains("'item'") && e.contains("double"),
        "{e}"
    );
    // An id the registry does not know.
    let e = d.decode(&framed(77, &b)).unwrap_err().to_string();
    assert!(
        e.contains("schema id 77") && e.contains("not registered"),
        "{e}"
    );
    let e = d.decode(&[1, 0, 0, 0, 1]).unwrap_err().to_string();
    assert!(e.contains("magic byte is 1"), "{e}");

    let batch = d.flush().unwrap();
    let rows: Vec<_> = (0..batch.num_rows()).map(|r| row_json(&batch, r)).collect();
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"id": 1, "item": "a", "qty": null}),
            serde_json::json!({"id": 1i64 << 40, "item": "b", "qty": 5}),
            serde_json::json!({"id": 3, "item": "c", "qty": null}),
            serde_json::json!({"id": 4, "item": "d", "qty": null}),
        ]
    );
    // Each id was compiled once; the switches back and forth asked nothing.
    assert_eq!(*source.asked.lock().unwrap(), vec![2, 1, 3, 77]);
}

#[test]
fn the_readers_defaults_aliases_and_enum_symbols_resolve_an_older_writer() {
    // The writer: `amt` (later renamed), a side with a symbol the reader dropped, no region,
    // no tags.
    let writer = AvroSchema::parse(
        r#"{"type":"record","name":"Order","fields":[
            {"name":"amt","type":"double"},
            {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL","SHORT"]}}]}"#,
    )
    .unwrap();
    let reader = AvroSchema::parse(
        r#"{"type":"record","name":"Order","fields":[
            {"name":"amount","type":"double","aliases":["amt"]},
            {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL","OTHER"],
                                   "default":"OTHER"}},
            {"name":"region","type":"string","default":"EU"},
            {"name":"level","type":"int","default":3},
            {"name":"tags","type":{"type":"array","items":"string"},"default":[]}]}"#,
    )
    .unwrap();
    let columns = vec![
        ColumnSpec::new("amount", DataType::Float64),
        ColumnSpec::new("side", DataType::Utf8),
        ColumnSpec::new("region", DataType::Utf8),
        ColumnSpec::new("level", DataType::Int64),
        ColumnSpec::new(
            "tags",
            DataType::List(Arc::new(weir_codec::Field::new(
                "item",
                DataType::Utf8,
                true,
            ))),
        ),
    ];
    let plan = AvroPlan::compile(
        &writer,
        Some(&reader),
        5,
        &columns,
        false,
        AvroDecoderOptions::default(),
    )
    .unwrap();
    assert_eq!(plan.missing_columns(), 3);
    /// A source that knows no other id.
    struct One;
    impl AvroPlanSource for One {
        fn plan(&self, id: u32) -> Result<Arc<AvroPlan>, SchemaIdError> {
            Err(SchemaIdError::unavailable(id, "test", "only one"))
        }
    }
    let plan = Arc::new(plan);
    let mut d = FramedAvroDecoder::new(Arc::new(One), plan, 10);
    for (amt, side) in [(1.5, 0), (2.5, 2)] {
        let mut b = Vec::new();
        b.extend_from_slice(&f64::to_le_bytes(amt));
        long(&mut b, side);
        d.decode(&framed(5, &b)).unwrap();
    }
    let batch = d.flush().unwrap();
    assert_eq!(
        row_json(&batch, 0),
        serde_json::json!({"amount": 1.5, "side": "BUY", "region": "EU", "level": 3, "tags": []})
    );
    assert_eq!(row_json(&batch, 1)["side"], "OTHER");

    // Without a default, a symbol the reader lacks fails its message only.
    let strict = AvroSchema::parse(
        r#"{"type":"record","name":"Order","fields":[
            {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}}]}"#,
    )
    .unwrap();
    let cols = [ColumnSpec::new("side", DataType::Utf8)];
    let plan = Arc::new(
        AvroPlan::compile(
            &writer,
            Some(&strict),
            5,
            &cols,
            false,
            AvroDecoderOptions::default(),
        )
        .unwrap(),
    );
    let mut d = FramedAvroDecoder::new(Arc::new(One), plan, 10);
    let mut b = 0.0f64.to_le_bytes().to_vec();
    long(&mut b, 2);
    let e = d.decode(&framed(5, &b)).unwrap_err().to_string();
    assert!(
        e.contains("field 'side'") && e.contains("not in the reader's enum"),
        "{e}"
    );
    let mut b = 0.0f64.to_le_bytes().to_vec();
    long(&mut b, 1);
    d.decode(&framed(5, &b)).unwrap();
    assert_eq!(row_json(&d.flush().unwrap(), 0)["side"], "SELL");
}

#[test]
fn a_fields_own_name_wins_over_an_alias_and_defaults_follow_the_readers_units() {
    let writer = AvroSchema::parse(
        r#"{"type":"record","name":"R","fields":[{"name":"y","type":"int"},{"name":"x","type":"int"}]}"#,
    )
    .unwrap();
    let reader = AvroSchema::parse(
        r#"{"type":"record","name":"R","fields":[
            {"name":"x","type":"int","aliases":["y"]},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"},"default":1500}]}"#,
    )
    .unwrap();
    let columns = [
        ColumnSpec::new("x", DataType::Int32),
        ColumnSpec::new(
            "at",
            DataType::Timestamp(weir_codec::TimeUnit::Microsecond, None),
        ),
    ];
    let plan = Arc::new(
        AvroPlan::compile(
            &writer,
            Some(&reader),
            1,
            &columns,
            false,
            AvroDecoderOptions::default(),
        )
        .unwrap(),
    );
    struct None_;
    impl AvroPlanSource for None_ {
        fn plan(&self, id: u32) -> Result<Arc<AvroPlan>, SchemaIdError> {
            Err(SchemaIdError::unavailable(id, "test", "none"))
        }
    }
    let mut d = FramedAvroDecoder::new(Arc::new(None_), plan, 10);
    let mut b = Vec::new();
    long(&mut b, 1);
    long(&mut b, 2);
    d.decode(&framed(1, &b)).unwrap();
    let row = row_json(&d.flush().unwrap(), 0);
    assert_eq!(row["x"], 2, "x is read from x, not from its alias y");
    assert_eq!(row["at"], 1_500_000, "1500 ms as microseconds");
}

#[test]
fn a_column_one_schema_fills_with_nulls_keeps_its_validity_under_the_others() {
    // Version 4 lacks `item`: its rows hold a null there. Rows of version 1, which reads `item`
    // as a plain string, must still mark theirs valid in the same batch.
    const V4: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#;
    let columns = vec![
        ColumnSpec::new("id", DataType::Int64),
        ColumnSpec::new("item", DataType::Utf8),
    ];
    let source = Arc::new(Schemas {
        columns: columns.clone(),
        by_id: HashMap::from([(1, V1), (4, V4)]),
        asked: Mutex::default(),
    });
    let reference = source.plan(1).unwrap();
    let mut d = FramedAvroDecoder::new(source, reference, 100);
    let v1 = |id: i64, item: &[u8]| {
        let mut b = Vec::new();
        long(&mut b, id);
        bytes(&mut b, item);
        framed(1, &b)
    };
    let v4 = |id: i64| {
        let mut b = Vec::new();
        long(&mut b, id);
        framed(4, &b)
    };
    for m in [
        v1(1, b"a"),
        v4(2),
        v1(3, b"c"),
        v1(4, b"d"),
        v4(5),
        v1(6, b"f"),
    ] {
        d.decode(&m).unwrap();
    }
    let batch = d.flush().unwrap();
    let rows: Vec<_> = (0..batch.num_rows()).map(|r| row_json(&batch, r)).collect();
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"id": 1, "item": "a"}),
            serde_json::json!({"id": 2, "item": null}),
            serde_json::json!({"id": 3, "item": "c"}),
            serde_json::json!({"id": 4, "item": "d"}),
            serde_json::json!({"id": 5, "item": null}),
            serde_json::json!({"id": 6, "item": "f"}),
        ]
    );
}
