//! The custom-decoder example, registered under `custom.proto+stocks.QuoteNBBO`, gives the same
//! answers from SQL as the built-in protobuf encoding.

// The example is what users read; compiling it into the test proves it works as shown.
#[allow(dead_code)]
#[path = "../../examples/custom_decoder.rs"]
mod example;

use weir_codec::Framing;
use weir_testdata::{QuoteFormat, STOCKS_PROTO};

use crate::common::{write_quotes, Collect};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_and_builtin_encodings_agree() {
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("stocks.proto");
    std::fs::write(&proto, STOCKS_PROTO).unwrap();
    let data = dir.path().join("q.bin");
    write_quotes(&data, 20_000, 3, QuoteFormat::Protobuf, Framing::Varint);
    let mut results = Vec::new();
    for encoding in ["custom.proto+stocks.QuoteNBBO", "protobuf"] {
        let engine = example::engine(2);
        let script = example::pipeline(
            &data.display().to_string(),
            &proto.display().to_string(),
            encoding,
        );
        let mut out = Collect::default();
        engine.run_script(&script, &mut out).await.unwrap();
        let table = arrow::util::pretty::pretty_format_batches(&out.batches)
            .unwrap()
            .to_string();
        assert_eq!(engine.source_reports()[0].decoded, 20_000);
        results.push(table);
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].lines().count(), 9, "{}", results[0]);

    // A column the custom decoder does not have is refused at CREATE SOURCE.
    let engine = example::engine(1);
    let err = engine
        .run_script(
            &format!(
                "CREATE SOURCE q (nope INT) WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'custom.proto+stocks.QuoteNBBO')",
                data.display()
            ),
            &mut Collect::default(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no field 'nope'"), "{err}");
}
