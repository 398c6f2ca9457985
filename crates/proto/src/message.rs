//! Request encoding and response decoding for any API, with the version always explicit.
//!
//! A request on the wire is `size i32 | request header | body`; a response is
//! `size i32 | response header | body` (protocol guide, "Common Request and Response
//! Structure"). Request header v1 carries the client id; v2 adds tagged fields (KIP-482).
//! Response header v0 is the correlation id; v1 adds tagged fields. Which header version a
//! message uses follows from its API key and version; ApiVersions responses always use v0.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes, VersionRange};

use crate::error::ProtoError;
use crate::frame::SIZE_PREFIX_LEN;
use crate::read::Reader;

/// One Kafka API as kdirect speaks it: the kafka-protocol message types and the version range
/// kdirect implements (always within kafka-protocol's own range).
pub trait Api {
    /// The API key.
    const KEY: ApiKey;
    /// The versions kdirect speaks.
    const VERSIONS: VersionRange;
    /// The request message.
    type Request: Encodable + Decodable + HeaderVersion;
    /// The response message.
    type Response: Encodable + Decodable + HeaderVersion;
}

/// Checks `version` against what kdirect speaks for `A`.
pub fn check_version<A: Api>(version: i16) -> Result<(), ProtoError> {
    if version < A::VERSIONS.min || version > A::VERSIONS.max {
        return Err(ProtoError::VersionNotSpoken {
            api: A::KEY,
            version,
            supported: A::VERSIONS,
        });
    }
    Ok(())
}

/// Encodes a whole request frame (size prefix included) into `out`.
pub fn encode_request_into<A: Api>(
    out: &mut BytesMut,
    request: &A::Request,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Result<(), ProtoError> {
    check_version::<A>(version)?;
    let enc = |e: anyhow::Error| ProtoError::Encode {
        api: A::KEY,
        version,
        reason: e.to_string(),
    };
    let header = RequestHeader::default()
        .with_request_api_key(A::KEY as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(|c| StrBytes::from_string(c.to_owned())));
    let header_version = A::Request::header_version(version);
    let size = header.compute_size(header_version).map_err(enc)?
        + request.compute_size(version).map_err(enc)?;
    let size_i32 = i32::try_from(size).map_err(|_| ProtoError::Encode {
        api: A::KEY,
        version,
        reason: format!("request of {size} bytes does not fit a frame"),
    })?;
    out.reserve(SIZE_PREFIX_LEN + size);
    out.put_i32(size_i32);
    header.encode(out, header_version).map_err(enc)?;
    request.encode(out, version).map_err(enc)?;
    Ok(())
}

/// Encodes a whole request frame (size prefix included).
pub fn encode_request<A: Api>(
    request: &A::Request,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Result<Bytes, ProtoError> {
    let mut out = BytesMut::new();
    encode_request_into::<A>(&mut out, request, version, correlation_id, client_id)?;
    Ok(out.freeze())
}

/// The correlation id at the front of a response frame body (every response header version
/// starts with it), or `None` if the frame is shorter than four bytes.
pub fn peek_correlation_id(frame: &[u8]) -> Option<i32> {
    frame.first_chunk::<4>().map(|b| i32::from_be_bytes(*b))
}

/// Decodes a response frame body (size prefix already removed): the header, then the body at
/// `version`. Byte fields of the body (such as Fetch `records`) are slices of `frame`, not
/// copies. Returns the correlation id and the body.
pub fn decode_response<A: Api>(
    frame: Bytes,
    version: i16,
) -> Result<(i32, A::Response), ProtoError> {
    let header_version = A::Response::header_version(version);
    decode_response_with_header::<A>(frame, version, header_version)
}

pub(crate) fn decode_response_with_header<A: Api>(
    frame: Bytes,
    version: i16,
    header_version: i16,
) -> Result<(i32, A::Response), ProtoError> {
    check_version::<A>(version)?;
    // kafka-protocol sizes `Vec`s from counts read off the wire without comparing them with the
    // bytes that remain; walk the frame with kdirect's bounded reader first, so that what it
    // decodes is known to fit (see the crate docs). The walk allocates nothing.
    let mut r = Reader::new(&frame, A::KEY, version, false);
    r.header(header_version)?;
    crate::api::check_body(A::KEY, version, &mut r)?;
    let len = frame.len();
    let mut buf = frame;
    let dec = |buf: &Bytes, e: anyhow::Error| ProtoError::Decode {
        api: A::KEY,
        version,
        len,
        position: len - buf.remaining(),
        reason: e.to_string(),
    };
    let header = ResponseHeader::decode(&mut buf, header_version).map_err(|e| dec(&buf, e))?;
    let body = A::Response::decode(&mut buf, version).map_err(|e| dec(&buf, e))?;
    Ok((header.correlation_id, body))
}

/// Encodes a response frame (size prefix included): for tests (feature `test-support`).
#[cfg(feature = "test-support")]
pub fn encode_response<A: Api>(
    response: &A::Response,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, ProtoError> {
    let enc = |e: anyhow::Error| ProtoError::Encode {
        api: A::KEY,
        version,
        reason: e.to_string(),
    };
    let header_version = A::Response::header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version).map_err(enc)?
        + response.compute_size(version).map_err(enc)?;
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + size);
    out.put_i32(size as i32);
    header.encode(&mut out, header_version).map_err(enc)?;
    response.encode(&mut out, version).map_err(enc)?;
    Ok(out.freeze())
}
