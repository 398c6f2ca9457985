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
        }
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
                            emit(full.finish(batch_id)?)?;
                        }
                        cols.push(topic, partition, ts_type, &r);
                        n += 1;
                    }
                }
            }
        }
        if cols.rows > 0 {
            emit(cols.finish(batch_id)?)?;
        }
        Ok(n)
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

    fn finish(mut self, batch_id: u64) -> Result<RecordBatch, SinkError> {
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
        RecordBatch::try_new(
            kafka_schema(),
            vec![
                Arc::new(self.key.finish()),
                Arc::new(self.value.finish()),
                Arc::new(self.topic.finish()),
                Arc::new(self.partition.finish()),
                Arc::new(self.offset.finish()),
                Arc::new(self.timestamp.finish()),
                Arc::new(self.timestamp_type.finish()),
                Arc::new(headers),
            ],
        )
        .map_err(arrow)
    }
}
