//! b. The "generated" path: serde derive into a typed struct (borrowing strings where they have
//! no escapes), then one concrete Arrow builder per column, written by hand per document type.

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::builder::{
    Float64Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampMillisecondBuilder, TimestampNanosecondBuilder, UInt32Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Fields, SchemaRef};
use serde::Deserialize;

use crate::{Contender, Corpus, Result, BATCH_SIZE};

#[derive(Deserialize)]
struct QuoteBaseJson<'a> {
    #[serde(borrow)]
    ticker: Cow<'a, str>,
    timestamp: i64,
    sequence_number: i64,
}

#[derive(Deserialize)]
struct QuoteJson<'a> {
    #[serde(borrow)]
    base: Option<QuoteBaseJson<'a>>,
    bid_price: f64,
    bid_size: u32,
    bid_exchange: u32,
    ask_price: f64,
    ask_size: u32,
    ask_exchange: u32,
    conditions: i32,
    indicators: i32,
    tape: u32,
}

/// The quote: `serde_json::from_slice::<QuoteJson>` and 12 concrete builders.
pub struct QuoteDeriveDecoder {
    schema: SchemaRef,
    ticker: StringBuilder,
    timestamp: TimestampNanosecondBuilder,
    sequence_number: Int64Builder,
    bid_price: Float64Builder,
    bid_size: UInt32Builder,
    bid_exchange: UInt32Builder,
    ask_price: Float64Builder,
    ask_size: UInt32Builder,
    ask_exchange: UInt32Builder,
    conditions: Int32Builder,
    indicators: Int32Builder,
    tape: UInt32Builder,
    len: usize,
}

impl QuoteDeriveDecoder {
    /// A decoder producing `schema` (the quote's 12 flat columns).
    pub fn new(schema: SchemaRef) -> Self {
        let n = BATCH_SIZE;
        Self {
            schema,
            ticker: StringBuilder::with_capacity(n, n * 24),
            timestamp: TimestampNanosecondBuilder::with_capacity(n),
            sequence_number: Int64Builder::with_capacity(n),
            bid_price: Float64Builder::with_capacity(n),
            bid_size: UInt32Builder::with_capacity(n),
            bid_exchange: UInt32Builder::with_capacity(n),
            ask_price: Float64Builder::with_capacity(n),
            ask_size: UInt32Builder::with_capacity(n),
            ask_exchange: UInt32Builder::with_capacity(n),
            conditions: Int32Builder::with_capacity(n),
            indicators: Int32Builder::with_capacity(n),
            tape: UInt32Builder::with_capacity(n),
            len: 0,
        }
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.ticker.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.sequence_number.finish()),
            Arc::new(self.bid_price.finish()),
            Arc::new(self.bid_size.finish()),
            Arc::new(self.bid_exchange.finish()),
            Arc::new(self.ask_price.finish()),
            Arc::new(self.ask_size.finish()),
            Arc::new(self.ask_exchange.finish()),
            Arc::new(self.conditions.finish()),
            Arc::new(self.indicators.finish()),
            Arc::new(self.tape.finish()),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

impl Contender for QuoteDeriveDecoder {
    fn name(&self) -> &str {
        "b_serde_derive"
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            let q: QuoteJson<'_> = serde_json::from_slice(message)?;
            if let Some(base) = &q.base {
                self.ticker.append_value(&base.ticker);
                self.timestamp.append_value(base.timestamp);
                self.sequence_number.append_value(base.sequence_number);
            } else {
                self.ticker.append_null();
                self.timestamp.append_null();
                self.sequence_number.append_null();
            }
            self.bid_price.append_value(q.bid_price);
            self.bid_size.append_value(q.bid_size);
            self.bid_exchange.append_value(q.bid_exchange);
            self.ask_price.append_value(q.ask_price);
            self.ask_size.append_value(q.ask_size);
            self.ask_exchange.append_value(q.ask_exchange);
            self.conditions.append_value(q.conditions);
            self.indicators.append_value(q.indicators);
            self.tape.append_value(q.tape);
            self.len += 1;
            if self.len >= BATCH_SIZE {
                sink(self.finish()?);
            }
        }
        if self.len > 0 {
            sink(self.finish()?);
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct AddressJson<'a> {
    #[serde(borrow)]
    country: Cow<'a, str>,
}

#[derive(Deserialize)]
struct CustomerJson<'a> {
    id: i64,
    #[serde(borrow)]
    address: AddressJson<'a>,
    #[serde(borrow)]
    tags: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ItemJson<'a> {
    #[serde(borrow)]
    sku: Cow<'a, str>,
    qty: i64,
    price: f64,
}

#[derive(Deserialize)]
struct PaymentJson<'a> {
    amount: f64,
    #[serde(borrow)]
    currency: Cow<'a, str>,
}

#[derive(Deserialize)]
struct OrderJson<'a> {
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    ts: i64,
    #[serde(borrow)]
    customer: CustomerJson<'a>,
    #[serde(borrow)]
    items: Vec<ItemJson<'a>>,
    #[serde(borrow)]
    payment: PaymentJson<'a>,
    #[serde(borrow)]
    notes: Cow<'a, str>,
    metrics: Vec<f64>,
}

/// The order event: `serde_json::from_slice::<OrderJson>` and 11 concrete builders.
pub struct OrderDeriveDecoder {
    schema: SchemaRef,
    event_id: StringBuilder,
    event_type: StringBuilder,
    ts: TimestampMillisecondBuilder,
    customer_id: Int64Builder,
    country: StringBuilder,
    tags: ListBuilder<StringBuilder>,
    items: ListBuilder<StructBuilder>,
    amount: Float64Builder,
    currency: StringBuilder,
    notes: StringBuilder,
    metrics: ListBuilder<Float64Builder>,
    len: usize,
}

impl OrderDeriveDecoder {
    /// A decoder producing `schema` (the order's 11 flat columns; `item_fields` are the
    /// struct fields of `items`).
    pub fn new(schema: SchemaRef, item_fields: Fields) -> Self {
        let n = BATCH_SIZE;
        let item = Arc::new(Field::new(
            "item",
            arrow_schema::DataType::Struct(item_fields.clone()),
            true,
        ));
        Self {
            schema,
            event_id: StringBuilder::with_capacity(n, n * 36),
            event_type: StringBuilder::with_capacity(n, n * 16),
            ts: TimestampMillisecondBuilder::with_capacity(n),
            customer_id: Int64Builder::with_capacity(n),
            country: StringBuilder::with_capacity(n, n * 2),
            tags: ListBuilder::new(StringBuilder::new()),
            items: ListBuilder::new(StructBuilder::from_fields(item_fields, n * 6))
                .with_field(item),
            amount: Float64Builder::with_capacity(n),
            currency: StringBuilder::with_capacity(n, n * 3),
            notes: StringBuilder::with_capacity(n, n * 64),
            metrics: ListBuilder::new(Float64Builder::new()),
            len: 0,
        }
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.event_id.finish()),
            Arc::new(self.event_type.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.customer_id.finish()),
            Arc::new(self.country.finish()),
            Arc::new(self.tags.finish()),
            Arc::new(self.items.finish()),
            Arc::new(self.amount.finish()),
            Arc::new(self.currency.finish()),
            Arc::new(self.notes.finish()),
            Arc::new(self.metrics.finish()),
        ];
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

impl Contender for OrderDeriveDecoder {
    fn name(&self) -> &str {
        "b_serde_derive"
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            let o: OrderJson<'_> = serde_json::from_slice(message)?;
            self.event_id.append_value(&o.event_id);
            self.event_type.append_value(&o.event_type);
            self.ts.append_value(o.ts);
            self.customer_id.append_value(o.customer.id);
            self.country.append_value(&o.customer.address.country);
            for t in &o.customer.tags {
                self.tags.values().append_value(t);
            }
            self.tags.append(true);
            for it in &o.items {
                let s = self.items.values();
                s.field_builder::<StringBuilder>(0)
                    .ok_or("sku builder")?
                    .append_value(&it.sku);
                s.field_builder::<Int64Builder>(1)
                    .ok_or("qty builder")?
                    .append_value(it.qty);
                s.field_builder::<Float64Builder>(2)
                    .ok_or("price builder")?
                    .append_value(it.price);
                s.append(true);
            }
            self.items.append(true);
            self.amount.append_value(o.payment.amount);
            self.currency.append_value(&o.payment.currency);
            self.notes.append_value(&o.notes);
            self.metrics.values().append_slice(&o.metrics);
            self.metrics.append(true);
            self.len += 1;
            if self.len >= BATCH_SIZE {
                sink(self.finish()?);
            }
        }
        if self.len > 0 {
            sink(self.finish()?);
        }
        Ok(())
    }
}
