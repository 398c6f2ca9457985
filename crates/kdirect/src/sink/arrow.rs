//! A batch as Arrow `RecordBatch`es, in Spark's Kafka source schema (feature `arrow`).
//!
//! The columns are those of Spark's `kafka` source (Structured Streaming + Kafka Integration
//! Guide, "Each row in the source has the following schema"), with `includeHeaders=true`:
//!
//! | column          | Arrow type                                  | Spark type                        |
//! |-----------------|---------------------------------------------|-----------------------------------|
//! | `key`           | binary (null: no key)                       | binary                            |
//! | `value`         | binary (null: a tombstone)                  | binary                            |
//! | `topic`         | utf8                                        | string                            |
//! | `partition`     | int32                                       | int                               |
//! | `offset`        | int64                                       | long                              |
//! | `timestamp`     | timestamp[ms, tz=UTC]                       | timestamp                         |
//! | `timestampType` | int32 (0 CreateTime, 1 LogAppendTime)       | int                               |
//! | `headers`       | list<struct<key: utf8, value: binary>>      | array<struct<key:string,value:binary>> |
//!
//! `timestamp` carries the UTC time zone, so Parquet marks it `isAdjustedToUTC` and Spark reads
//! it back as `timestamp` (without a zone it would be `timestamp_ntz`). `headers` is null for a
//! record without headers, as Spark's source gives it; a header key that is not UTF-8 (Kafka's
//! keys are strings, but the wire does not check) is converted lossily (U+FFFD).
//!
//! With [`ArrowConverter::with_json_values`] (feature `json-values`) each value is decoded as
//! one JSON object of a given Arrow schema, as Spark's `from_json` and kafka-delta-ingest do:
//! the schema's fields come first, as columns, then the columns above without `value`. Fields
//! the schema does not name are ignored, a missing or `null` field is null (an error if the
//! field is not nullable), and a tombstone is a row of nulls. A value that is not one JSON
//! object of the schema (not JSON, two objects, a string where a number is asked for) fails
//! the batch with [`SinkErrorKind::JsonValue`] naming its topic, partition and offset: the
//! stream's exactly-once promise holds for what is written, and nothing is dropped silently.
//!
//! Built in one pass over the decoded records: each column's buffers are sized before the walk
//! from what the fetch already knows (records: the stored batches' record counts, bounded by
//! the range's offsets; bytes: the stored batches' sizes), so appending a record only copies
//! its bytes. Keys, values and headers are copied out of the fetch buffers (Arrow's binary
//! arrays are contiguous); the cost per record is in `docs/bench.md`.

use std::sync::{Arc, OnceLock};

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use kdirect_engine::fetch::RangeData;
use kdirect_engine::record::{DecodeOptions, Scratch, TimestampType};

use super::{SinkError, SinkErrorKind};
use crate::Batch;

/// Rows per `RecordBatch` at most, by default (a Parquet row group is built from several).
pub const DEFAULT_MAX_ROWS: usize = 64 * 1024;

/// Bytes of keys, values and headers per `RecordBatch` at most: Arrow's binary arrays address
/// their bytes with 32-bit offsets, so a batch is cut well before 2 GiB.
const MAX_BYTES: usize = 1 << 30;

/// Spark's Kafka source schema (see the [module docs](self)).
pub fn kafka_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                Field::new("key", DataType::Binary, true),
                Field::new("value", DataType::Binary, true),
                Field::new("topic", DataType::Utf8, false),
                Field::new("partition", DataType::Int32, false),
                Field::new("offset", DataType::Int64, false),
                Field::new(
                    "timestamp",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    false,
                ),
                Field::new("timestampType", DataType::Int32, false),
                Field::new("headers", headers_type(), true),
            ]))
        })
        .clone()
}

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        false,
    ))
}

fn headers_type() -> DataType {
    DataType::List(header_item())
}

/// Turns batches into Arrow `RecordBatch`es; keeps its decompression buffer from one batch to
/// the next, so reuse one converter per stream.
#[derive(Debug)]
pub struct ArrowConverter {
    scratch: Scratch,
    max_rows: usize,
    max_decompressed: usize,
    /// The schema values are decoded with, and the `RecordBatch`es' schema then.
    #[cfg(feature = "json-values")]
    json: Option<(SchemaRef, SchemaRef)>,
}

impl Default for ArrowConverter {
    fn default() -> Self {
        ArrowConverter::new()
    }
}

impl ArrowConverter {
    /// A converter with at most [`DEFAULT_MAX_ROWS`] rows per `RecordBatch`.
    pub fn new() -> ArrowConverter {
        ArrowConverter {
            scratch: Scratch::new(),
            max_rows: DEFAULT_MAX_ROWS,
            max_decompressed: DecodeOptions::DEFAULT_MAX_DECOMPRESSED,
            #[cfg(feature = "json-values")]
            json: None,
        }
    }

    /// Decodes each record's value as one JSON object of `schema` (feature `json-values`; see
    /// the [module docs](self)): the `RecordBatch`es have `schema`'s fields, then
    /// [`kafka_schema`]'s without `value` ([`schema`](Self::schema)). Refused
    /// ([`SinkErrorKind::Spec`]) when a field of `schema` has the name of one of those
    /// columns.
    #[cfg(feature = "json-values")]
    pub fn with_json_values(mut self, schema: SchemaRef) -> Result<ArrowConverter, SinkError> {
        let kafka = kafka_schema();
        let kept: Vec<arrow_schema::FieldRef> = kafka
            .fields()
            .iter()
            .filter(|f| f.name() != "value")
            .cloned()
            .collect();
        if let Some(f) = schema
            .fields()
            .iter()
            .find(|f| kept.iter().any(|k| k.name() == f.name()))
        {
            return Err(SinkErrorKind::Spec {
                spec: "json values".into(),
                reason: format!(
                    "the values' schema has a field '{}', which is also a Kafka column; rename it",
                    f.name()
                ),
            }
            .into());
        }
        let fields: Vec<arrow_schema::FieldRef> =
            schema.fields().iter().cloned().chain(kept).collect();
        self.json = Some((schema, Arc::new(Schema::new(fields))));
        Ok(self)
    }

    /// The schema of the `RecordBatch`es this converter makes: [`kafka_schema`], or with
    /// [`with_json_values`](Self::with_json_values) the values' fields and the Kafka columns
    /// but `value`.
    pub fn schema(&self) -> SchemaRef {
        #[cfg(feature = "json-values")]
        if let Some((_, out)) = &self.json {
            return out.clone();
        }
        kafka_schema()
    }

    /// At most `rows` rows per `RecordBatch` (at least 1).
    pub fn with_max_rows(mut self, rows: usize) -> ArrowConverter {
        self.max_rows = rows.max(1);
        self
    }

    /// The largest stored batch, decompressed, to accept (the stream's
    /// `DecodeOptions::max_decompressed`; 128 MiB by default).
    pub fn with_max_decompressed(mut self, bytes: usize) -> ArrowConverter {
        self.max_decompressed = bytes;
        self
    }

    /// Every record `batch` holds, as `RecordBatch`es of [`kafka_schema`] (a batch without
    /// records gives none).
    pub fn to_record_batches(&mut self, batch: &Batch) -> Result<Vec<RecordBatch>, SinkError> {
        let mut out = Vec::new();
        self.convert(batch, |rb| {
            out.push(rb);
            Ok::<(), SinkError>(())
        })?;
        Ok(out)
    }

    /// Calls `emit` with each `RecordBatch` of `batch`'s records as soon as it is full (at
    /// most the row limit, and at most 1 GiB of bytes), then with the last one. Returns the
    /// records converted.
    pub fn convert<E: From<SinkError>>(
        &mut self,
        batch: &Batch,
        mut emit: impl FnMut(RecordBatch) -> Result<(), E>,
    ) -> Result<u64, E> {
        let batch_id = batch.id();
        let json = self.json_schema().cloned();
        let data = batch.range_data();
        // What the fetch knows before the walk: records (each stored batch's count, bounded
        // by its range's offsets: the count is read off the wire) and bytes.
        let mut rows_left: usize = data.iter().map(estimated_rows).sum();
        let bytes: usize = data.iter().map(RangeData::bytes).sum();
        let mut cols = Columns::with_capacity(rows_left.min(self.max_rows), bytes.min(MAX_BYTES));
        let mut n = 0u64;
        for d in data {
            let topic = d.range.topic.as_str();
            let partition = d.range.partition;
            for chunk in &d.chunks {
                let fail = |source| -> E {
                    SinkError::from(SinkErrorKind::Records {
                        batch_id,
                        source: Box::new(crate::Error::from(kdirect_engine::Error::from(
                            kdirect_engine::ErrorKind::Decode {
                                broker: chunk.broker().clone(),
                                topic: topic.to_owned(),
                                partition,
                                source,
                            },
                        ))),
                    })
                    .into()
                };
                for b in chunk.batches() {
                    let ts_type = match b.header().timestamp_type() {
                        TimestampType::CreateTime => 0,
                        TimestampType::LogAppendTime => 1,
                    };
                    let records = b
                        .records(&mut self.scratch, self.max_decompressed)
                        .map_err(fail)?;
                    for r in records {
                        let r = r.map_err(fail)?;
                        if cols.rows >= self.max_rows || cols.bytes + record_bytes(&r) > MAX_BYTES {
                            rows_left = rows_left.saturating_sub(cols.rows);
                            let full = std::mem::replace(
                                &mut cols,
                                Columns::with_capacity(
                                    rows_left.clamp(1, self.max_rows),
                                    bytes.min(MAX_BYTES),
                                ),
                            );
                            emit(full.finish(batch_id, json.as_ref())?)?;
                        }
                        cols.push(topic, partition, ts_type, &r);
                        n += 1;
                    }
                }
            }
        }
        if cols.rows > 0 {
            emit(cols.finish(batch_id, json.as_ref())?)?;
        }
        Ok(n)
    }

    #[cfg(feature = "json-values")]
    fn json_schema(&self) -> Option<&(SchemaRef, SchemaRef)> {
        self.json.as_ref()
    }

    #[cfg(not(feature = "json-values"))]
    fn json_schema(&self) -> Option<&(SchemaRef, SchemaRef)> {
        None
    }
}

/// Records a range holds at most: its stored batches' record counts, and never more than its
/// offsets.
fn estimated_rows(d: &RangeData) -> usize {
    let counted: u64 = d
        .chunks
        .iter()
        .flat_map(|c| c.batches())
        .map(|b| u64::try_from(b.header().record_count).unwrap_or(0))
        .sum();
    usize::try_from(counted.min(d.range.len())).unwrap_or(usize::MAX)
}

fn record_bytes(r: &kdirect_engine::record::Record<'_>) -> usize {
    let kv = r.key().map_or(0, <[u8]>::len) + r.value().map_or(0, <[u8]>::len);
    if r.headers().is_empty() {
        return kv;
    }
    kv + r
        .headers()
        .map(|h| h.key().len() + h.value().map_or(0, <[u8]>::len))
        .sum::<usize>()
}

/// The columns of one `RecordBatch` being built.
struct Columns {
    rows: usize,
    bytes: usize,
    key: BinaryBuilder,
    value: BinaryBuilder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: TimestampMillisecondBuilder,
    timestamp_type: Int32Builder,
    /// `headers`: list offsets into the header rows, and which lists are null.
    header_offsets: Vec<i32>,
    header_valid: BooleanBufferBuilder,
    header_key: StringBuilder,
    header_value: BinaryBuilder,
}

impl Columns {
    fn with_capacity(rows: usize, bytes: usize) -> Columns {
        let mut header_offsets = Vec::with_capacity(rows + 1);
        header_offsets.push(0);
        Columns {
            rows: 0,
            bytes: 0,
            // Keys are usually short next to values: an eighth of the bytes, grown if not.
            key: BinaryBuilder::with_capacity(rows, bytes / 8),
            value: BinaryBuilder::with_capacity(rows, bytes),
            topic: StringBuilder::with_capacity(rows, rows * 16),
            partition: Int32Builder::with_capacity(rows),
            offset: Int64Builder::with_capacity(rows),
            timestamp: TimestampMillisecondBuilder::with_capacity(rows).with_timezone("UTC"),
            timestamp_type: Int32Builder::with_capacity(rows),
            header_offsets,
            header_valid: BooleanBufferBuilder::new(rows),
            header_key: StringBuilder::new(),
            header_value: BinaryBuilder::new(),
        }
    }

    #[inline]
    fn push(
        &mut self,
        topic: &str,
        partition: i32,
        ts_type: i32,
        r: &kdirect_engine::record::Record<'_>,
    ) {
        self.rows += 1;
        let (k, v) = (r.key(), r.value());
        self.bytes += k.map_or(0, <[u8]>::len) + v.map_or(0, <[u8]>::len);
        self.key.append_option(k);
        self.value.append_option(v);
        self.topic.append_value(topic);
        self.partition.append_value(partition);
        self.offset.append_value(r.offset());
        self.timestamp.append_value(r.timestamp());
        self.timestamp_type.append_value(ts_type);
        let headers = r.headers();
        if headers.is_empty() {
            self.header_valid.append(false);
        } else {
            self.header_valid.append(true);
            for h in headers {
                self.bytes += h.key().len() + h.value().map_or(0, <[u8]>::len);
                match h.key_str() {
                    Some(k) => self.header_key.append_value(k),
                    None => self
                        .header_key
                        .append_value(String::from_utf8_lossy(h.key())),
                }
                self.header_value.append_option(h.value());
            }
        }
        // At most MAX_BYTES of header bytes and fewer header rows: fits an i32.
        self.header_offsets
            .push(i32::try_from(self.header_key.len()).unwrap_or(i32::MAX));
    }

    /// The `RecordBatch` of the rows pushed: in [`kafka_schema`], or with `json` (the values'
    /// schema, the output schema) the values decoded to columns.
    fn finish(
        mut self,
        batch_id: u64,
        json: Option<&(SchemaRef, SchemaRef)>,
    ) -> Result<RecordBatch, SinkError> {
        let arrow = |source| SinkError::from(SinkErrorKind::Arrow { batch_id, source });
        let entries = StructArray::try_new(
            header_fields(),
            vec![
                Arc::new(self.header_key.finish()) as ArrayRef,
                Arc::new(self.header_value.finish()),
            ],
            None,
        )
        .map_err(arrow)?;
        let valid = self.header_valid.finish();
        let nulls = (valid.count_set_bits() < valid.len()).then(|| NullBuffer::new(valid));
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(ScalarBuffer::from(self.header_offsets)),
            Arc::new(entries),
            nulls,
        )
        .map_err(arrow)?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.timestamp_type.finish()),
            Arc::new(headers),
        ];
        match json {
            None => RecordBatch::try_new(kafka_schema(), columns).map_err(arrow),
            #[cfg(feature = "json-values")]
            Some((values, out)) => {
                let decoded = json::decode(values, &columns, batch_id)?;
                let mut all = decoded.columns().to_vec();
                all.extend(
                    columns
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| *i != 1)
                        .map(|(_, c)| c),
                );
                RecordBatch::try_new(out.clone(), all).map_err(arrow)
            }
            #[cfg(not(feature = "json-values"))]
            Some(_) => unreachable!("no JSON schema without the json-values feature"),
        }
    }
}

/// JSON values to columns (feature `json-values`).
#[cfg(feature = "json-values")]
mod json {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    use arrow_array::{Array, ArrayRef, RecordBatch};
    use arrow_json::reader::{Decoder, ReaderBuilder};
    use arrow_schema::SchemaRef;

    use crate::sink::{SinkError, SinkErrorKind};

    /// A tombstone's row: every field null.
    const NO_VALUE: &[u8] = b"{}";

    /// Decodes the `value` column of `kafka` (columns in [`super::kafka_schema`]'s order) as
    /// one JSON object of `schema` per row. The first row that is not names itself.
    pub(super) fn decode(
        schema: &SchemaRef,
        kafka: &[ArrayRef],
        batch_id: u64,
    ) -> Result<RecordBatch, SinkError> {
        let values = kafka[1].as_binary::<i32>();
        let rows = values.len();
        let fail = |row: usize, reason: String| -> SinkError {
            SinkErrorKind::JsonValue {
                batch_id,
                topic: kafka[2].as_string::<i32>().value(row).to_owned(),
                partition: kafka[3].as_primitive::<Int32Type>().value(row),
                offset: kafka[4].as_primitive::<Int64Type>().value(row),
                reason,
            }
            .into()
        };
        let mut decoder = decoder(schema, rows).map_err(|e| fail(0, e.to_string()))?;
        for row in 0..rows {
            let value = if values.is_null(row) {
                NO_VALUE
            } else {
                values.value(row)
            };
            push(&mut decoder, value).map_err(|reason| fail(row, reason))?;
        }
        match decoder.flush() {
            Ok(Some(batch)) if batch.num_rows() == rows => Ok(batch),
            Ok(other) => Err(fail(
                0,
                format!(
                    "{} rows decoded for {rows} values",
                    other.map_or(0, |b| b.num_rows())
                ),
            )),
            // A value of the wrong shape for the schema shows only when the columns are built:
            // find the first one, each alone.
            Err(e) => {
                for row in 0..rows {
                    let value = if values.is_null(row) {
                        NO_VALUE
                    } else {
                        values.value(row)
                    };
                    let mut one = decoder_for_one(schema).map_err(|e| fail(row, e.to_string()))?;
                    let alone = push(&mut one, value)
                        .and_then(|()| one.flush().map(|_| ()).map_err(|e| e.to_string()));
                    if let Err(reason) = alone {
                        return Err(fail(row, reason));
                    }
                }
                Err(fail(0, e.to_string()))
            }
        }
    }

    fn decoder(schema: &SchemaRef, rows: usize) -> Result<Decoder, arrow_schema::ArrowError> {
        // One more than the rows: a value holding two objects is counted, not cut off.
        ReaderBuilder::new(schema.clone())
            .with_batch_size(rows + 1)
            .build_decoder()
    }

    fn decoder_for_one(schema: &SchemaRef) -> Result<Decoder, arrow_schema::ArrowError> {
        decoder(schema, 1)
    }

    /// Feeds one value: exactly one whole JSON object, or an error saying what it was.
    fn push(decoder: &mut Decoder, value: &[u8]) -> Result<(), String> {
        let before = decoder.len();
        let used = decoder.decode(value).map_err(|e| e.to_string())?;
        // A newline ends a bare number or literal; between objects it is whitespace.
        let ended = decoder.decode(b"\n").map_err(|e| e.to_string())?;
        if used != value.len() || ended != 1 {
            return Err("more than one JSON value".into());
        }
        if decoder.has_partial_record() {
            return Err("not a whole JSON object (truncated?)".into());
        }
        match decoder.len() - before {
            1 => Ok(()),
            0 => Err("empty: no JSON object".into()),
            n => Err(format!("more than one JSON value ({n} objects)")),
        }
    }
}
