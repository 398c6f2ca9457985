//! Zigzag varint (i32, at most 5 bytes) and varlong (i64, at most 10 bytes) readers, as Kafka's
//! `ByteUtils.readVarint` / `readVarlong`: a 5th (10th) byte with its high bit set is malformed;
//! the unused high bits of the last byte are dropped, as the Java client does.
//!
//! They return `None` on a malformed or truncated varint and leave `pos` unchanged then; the
//! caller turns that into a [`DecodeError`](super::DecodeError) with its own position and field.

/// Reads a zigzag varint at `*pos`, advancing `pos` past it. One- and two-byte values (the
/// common lengths and deltas) take the inlined fast path.
#[inline(always)]
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let p = *pos;
    let b0 = *buf.get(p)?;
    if b0 < 0x80 {
        *pos = p + 1;
        return Some(unzigzag32(u32::from(b0)));
    }
    let b1 = *buf.get(p + 1)?;
    if b1 < 0x80 {
        *pos = p + 2;
        return Some(unzigzag32(u32::from(b0 & 0x7f) | (u32::from(b1) << 7)));
    }
    // By value, so that `pos` never escapes and stays in a register on the fast path.
    let (v, n) = read_uvarint32_slow(buf, p)?;
    *pos = p + n;
    Some(unzigzag32(v))
}

#[inline(never)]
fn read_uvarint32_slow(buf: &[u8], p: usize) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for i in 0..5usize {
        let b = *buf.get(p.checked_add(i)?)?;
        value |= u32::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Reads a zigzag varlong at `*pos`, advancing `pos` past it.
#[inline(always)]
pub(crate) fn read_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let p = *pos;
    let b0 = *buf.get(p)?;
    if b0 < 0x80 {
        *pos = p + 1;
        return Some(unzigzag64(u64::from(b0)));
    }
    let b1 = *buf.get(p + 1)?;
    if b1 < 0x80 {
        *pos = p + 2;
        return Some(unzigzag64(u64::from(b0 & 0x7f) | (u64::from(b1) << 7)));
    }
    let (v, n) = read_uvarint64_slow(buf, p)?;
    *pos = p + n;
    Some(unzigzag64(v))
}

#[inline(never)]
fn read_uvarint64_slow(buf: &[u8], p: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..10usize {
        let b = *buf.get(p.checked_add(i)?)?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((value, i + 1));
        }
    }
    None
}

#[inline(always)]
pub(crate) fn unzigzag32(n: u32) -> i32 {
    ((n >> 1) as i32) ^ -((n & 1) as i32)
}

#[inline(always)]
pub(crate) fn unzigzag64(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn zz_encode64(v: i64, out: &mut Vec<u8>) {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    #[test]
    fn round_trips_varint_edges() {
        for v in [
            0i32,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            8191,
            8192,
            i32::MAX,
            i32::MIN,
            300,
            -300,
        ] {
            let mut buf = vec![0xAA];
            zz_encode64(i64::from(v), &mut buf);
            buf.push(0xBB);
            let mut pos = 1;
            assert_eq!(read_varint(&buf, &mut pos), Some(v), "{v}");
            assert_eq!(buf[pos], 0xBB);
        }
    }

    #[test]
    fn round_trips_varlong_edges() {
        for v in [
            0i64,
            1,
            -1,
            1 << 40,
            -(1 << 40),
            i64::MAX,
            i64::MIN,
            1_700_000_000_000,
        ] {
            let mut buf = vec![];
            zz_encode64(v, &mut buf);
            let mut pos = 0;
            assert_eq!(read_varlong(&buf, &mut pos), Some(v), "{v}");
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn rejects_truncated_and_overlong() {
        let mut pos = 0;
        assert_eq!(read_varint(&[], &mut pos), None);
        assert_eq!(read_varint(&[0x80], &mut pos), None);
        assert_eq!(read_varint(&[0x80, 0x80], &mut pos), None);
        assert_eq!(read_varint(&[0x80; 5], &mut pos), None);
        assert_eq!(
            read_varint(&[0xff, 0xff, 0xff, 0xff, 0x0f], &mut pos),
            Some(i32::MIN)
        );
        pos = 0;
        assert_eq!(read_varlong(&[0x80; 10], &mut pos), None);
        assert_eq!(read_varlong(&[0x80; 11], &mut pos), None);
        assert_eq!(pos, 0);
    }
}
