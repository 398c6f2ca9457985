//! `kdirect decode FILE`: decode a records byte stream (concatenated record batches, as in a
//! Fetch response partition's `records`) with the engine's record decoder.
//!
//! Output, one JSON line per data record:
//! `{"offset":0,"timestamp":1700000000000,"key":"…"|null,"value":"…"|null,"headers":[{"key":"k","value":"…"|null}]}`
//! with keys, values and header values in the `--bytes` encoding (header keys are strings on
//! the wire and are printed as UTF-8). Control batches are not printed (they are not data);
//! `--batches` prints one line per batch header instead, control batches included.
//! A file that ends inside a batch is not an error (a fetch response cut at its byte limit): a
//! note on stderr says where. A malformed file exits non-zero with the byte position and reason.
//! The input is read one batch at a time (a FIFO or a pipe works; memory is bounded by the
//! largest batch, `--max-batch-bytes`).
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use bytes::Bytes;
use kdirect_engine::record::{
    Batches, DecodeOptions, RecordBatch, RecordBatchReader, Tail, TimestampType,
};

use super::CliError;

/// How to print key, value and header-value bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BytesFormat {
    /// Standard base64 with padding (lossless; the default).
    Base64,
    /// UTF-8 text; invalid sequences become U+FFFD (lossy).
    Utf8,
    /// Lowercase hex.
    Hex,
}

/// Arguments of `kdirect decode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A file holding concatenated record batches, as in a Fetch response partition's `records`.
    pub file: PathBuf,
    /// Encoding of keys, values and header values in the output.
    #[arg(long = "bytes", value_enum, default_value_t = BytesFormat::Base64)]
    pub bytes: BytesFormat,
    /// Do not verify each batch's CRC32C.
    #[arg(long)]
    pub no_crc: bool,
    /// Print one line per batch header instead of one per record.
    #[arg(long)]
    pub batches: bool,
    /// The largest record batch accepted (bytes): the input is read one batch at a time, so
    /// this bounds memory.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_batch_bytes: usize,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let file = args.file.display().to_string();
    let f = std::fs::File::open(&args.file).map_err(|e| CliError(format!("{file}: {e}")))?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(CliError(format!("{file}: is a directory")));
    }
    let mut input = Input {
        r: std::io::BufReader::with_capacity(64 << 10, f),
        pos: 0,
        max: args.max_batch_bytes,
        file: &file,
    };
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let io = |e: std::io::Error| CliError(format!("writing output: {e}"));
    let mut line = String::with_capacity(256);
    let mut next_offset = None;
    // One batch in memory at a time: memory is bounded by the largest batch, whatever the
    // input is (a FIFO, a device, a file of any size).
    let tail = loop {
        let (start, bytes) = match input.next()? {
            Next::Batch(start, bytes) => (start, bytes),
            Next::End => break None,
            Next::Truncated(t) => break Some(t),
        };
        let fail = |e: kdirect_engine::record::DecodeError| {
            CliError(format!("{file}: {}", e.shifted(start)))
        };
        if args.batches {
            let mut batches = Batches::new(bytes, !args.no_crc);
            while let Some(batch) = batches.next_batch().map_err(fail)? {
                line.clear();
                batch_line(&batch, start, &mut line);
                out.write_all(line.as_bytes()).map_err(io)?;
            }
        } else {
            let opts = DecodeOptions::new().check_crc(!args.no_crc);
            let mut reader = RecordBatchReader::new(bytes, opts);
            while let Some(batch) = reader.next_batch().map_err(fail)? {
                for record in reader.records(&batch).map_err(fail)? {
                    let r = record.map_err(fail)?;
                    line.clear();
                    push_record_json(&mut line, None, &r, args.bytes);
                    out.write_all(line.as_bytes()).map_err(io)?;
                }
            }
            if reader.position() > 0 {
                next_offset = Some(reader.next_offset());
            }
        }
    };
    out.flush().map_err(io)?;
    if let Some(Tail::Truncated {
        position,
        needed,
        available,
    }) = tail
    {
        let needed = needed.map_or_else(|| "at least 12".to_owned(), |n| n.to_string());
        let next = next_offset.map_or_else(String::new, |o| {
            format!("; the next fetch would start at offset {o}")
        });
        eprintln!(
            "note: {file} ends inside a batch at byte {position} ({available} of {needed} bytes){next}"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The input read one record batch at a time: each batch's 12-byte prefix (base offset,
/// length) says how much more to read.
struct Input<'a, R> {
    r: R,
    pos: usize,
    max: usize,
    file: &'a str,
}

enum Next {
    /// A whole batch and its byte position in the input.
    Batch(usize, Bytes),
    /// The input ended between batches.
    End,
    /// The input ended inside a batch.
    Truncated(Tail),
}

impl<R: std::io::Read> Input<'_, R> {
    fn next(&mut self) -> Result<Next, CliError> {
        use std::io::Read;
        let read_err = |e: std::io::Error| CliError(format!("{}: {e}", self.file));
        let start = self.pos;
        let mut head = [0u8; 12];
        let mut got = 0;
        while got < head.len() {
            match self.r.read(head.get_mut(got..).unwrap_or(&mut [])) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_err(e)),
            }
        }
        if got == 0 {
            return Ok(Next::End);
        }
        if got < head.len() {
            return Ok(Next::Truncated(Tail::Truncated {
                position: start,
                needed: None,
                available: got,
            }));
        }
        let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        // A negative or too-short length is the decoder's to report (with its position):
        // hand it the prefix alone.
        let body = usize::try_from(len).unwrap_or(0);
        let total = head.len().saturating_add(body);
        if total > self.max {
            return Err(CliError(format!(
                "{}: the batch at byte {start} claims {total} bytes, more than \
                 --max-batch-bytes ({}): not a records file, or raise the limit",
                self.file, self.max
            )));
        }
        // Grown as bytes arrive (never the claimed size up front).
        let mut buf = Vec::with_capacity(total.min(1 << 20));
        buf.extend_from_slice(&head);
        (&mut self.r)
            .take(body as u64)
            .read_to_end(&mut buf)
            .map_err(read_err)?;
        self.pos += buf.len();
        if buf.len() < total {
            return Ok(Next::Truncated(Tail::Truncated {
                position: start,
                needed: Some(total),
                available: buf.len(),
            }));
        }
        Ok(Next::Batch(start, Bytes::from(buf)))
    }
}

fn batch_line(batch: &RecordBatch, start: usize, line: &mut String) {
    let h = batch.header();
    let ts_type = match h.timestamp_type() {
        TimestampType::CreateTime => "create_time",
        TimestampType::LogAppendTime => "log_append_time",
    };
    let _ = writeln!(
        line,
        "{{\"position\":{},\"base_offset\":{},\"last_offset\":{},\"batch_length\":{},\
         \"partition_leader_epoch\":{},\"magic\":{},\"crc\":{},\"compression\":\"{}\",\
         \"timestamp_type\":\"{}\",\"transactional\":{},\"control\":{},\"producer_id\":{},\
         \"producer_epoch\":{},\"base_sequence\":{},\"base_timestamp\":{},\"max_timestamp\":{},\
         \"record_count\":{}}}",
        start + batch.position(),
        h.base_offset,
        h.last_offset(),
        h.batch_length,
        h.partition_leader_epoch,
        h.magic,
        h.crc,
        h.compression,
        ts_type,
        h.is_transactional(),
        h.is_control(),
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.base_timestamp,
        h.max_timestamp,
        h.record_count,
    );
}

/// Appends one record as a JSON line (with `"topic"` and `"partition"` first when given):
/// `{"offset":0,"timestamp":…,"key":…,"value":…,"headers":[{"key":"k","value":…}]}` and a
/// newline. Shared by `decode` and `consume`.
pub(super) fn push_record_json(
    line: &mut String,
    topic_partition: Option<(&str, i32)>,
    r: &kdirect_engine::record::Record<'_>,
    format: BytesFormat,
) {
    line.push('{');
    if let Some((topic, partition)) = topic_partition {
        line.push_str("\"topic\":");
        push_json_str(line, topic);
        let _ = write!(line, ",\"partition\":{partition},");
    }
    let _ = write!(
        line,
        "\"offset\":{},\"timestamp\":{},\"key\":",
        r.offset(),
        r.timestamp()
    );
    push_bytes(line, r.key(), format);
    line.push_str(",\"value\":");
    push_bytes(line, r.value(), format);
    line.push_str(",\"headers\":[");
    for (i, h) in r.headers().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push_str("{\"key\":");
        push_json_str(line, &String::from_utf8_lossy(h.key()));
        line.push_str(",\"value\":");
        push_bytes(line, h.value(), format);
        line.push('}');
    }
    line.push_str("]}\n");
}

fn push_bytes(line: &mut String, b: Option<&[u8]>, format: BytesFormat) {
    let Some(b) = b else {
        line.push_str("null");
        return;
    };
    match format {
        BytesFormat::Utf8 => push_json_str(line, &String::from_utf8_lossy(b)),
        BytesFormat::Hex => {
            line.push('"');
            for byte in b {
                let _ = write!(line, "{byte:02x}");
            }
            line.push('"');
        }
        BytesFormat::Base64 => {
            line.push('"');
            base64(b, line);
            line.push('"');
        }
    }
}

fn push_json_str(line: &mut String, s: &str) {
    // serde_json escapes exactly what JSON needs.
    match serde_json::to_string(s) {
        Ok(q) => line.push_str(&q),
        Err(_) => line.push_str("null"),
    }
}

/// Standard base64 (RFC 4648) with padding.
fn base64(b: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |i: u32| char::from(ALPHABET[(i & 63) as usize]);
    for chunk in b.chunks(3) {
        let n = match *chunk {
            [a, b, c] => (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c),
            [a, b] => (u32::from(a) << 16) | (u32::from(b) << 8),
            [a] => u32::from(a) << 16,
            _ => 0,
        };
        out.push(sym(n >> 18));
        out.push(sym(n >> 12));
        out.push(if chunk.len() > 1 { sym(n >> 6) } else { '=' });
        out.push(if chunk.len() > 2 { sym(n) } else { '=' });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut s = String::new();
            base64(input.as_bytes(), &mut s);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn bytes_formats() {
        let mut s = String::new();
        push_bytes(&mut s, Some(b"a\"\n\xff"), BytesFormat::Utf8);
        assert_eq!(s, "\"a\\\"\\n\u{fffd}\"");
        s.clear();
        push_bytes(&mut s, Some(&[0, 255]), BytesFormat::Hex);
        assert_eq!(s, "\"00ff\"");
        s.clear();
        push_bytes(&mut s, None, BytesFormat::Base64);
        assert_eq!(s, "null");
    }
}
