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
        Ok(Arc::new(AvroPlan::compile(
            &schema,
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
