//! The protobuf wire format, read field by field without a schema: what a decoded message cannot
//! show, such as whether a field was on the wire at all (a proto2 default decodes the same as the
//! value written), and where a message stops decoding.

/// Reads the varint at `*pos` and moves `*pos` past it; `None` when `buf` ends inside it or it
/// runs over ten bytes.
#[must_use]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The top-level fields of message `buf` in wire order, as `(field number, contents)`: the bytes
/// of a length-delimited field (an embedded message, a string, a packed list), empty for the
/// other wire types. `None` when `buf` is not a sequence of whole fields.
#[must_use]
pub fn fields(buf: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = read_varint(buf, &mut pos)?;
        let body: &[u8] = match key & 7 {
            0 => {
                read_varint(buf, &mut pos)?;
                &[]
            }
            1 => {
                pos = pos.checked_add(8)?;
                &[]
            }
            2 => {
                let len = usize::try_from(read_varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len)?;
                let body = buf.get(pos..end)?;
                pos = end;
                body
            }
            5 => {
                pos = pos.checked_add(4)?;
                &[]
            }
            _ => return None,
        };
        out.push((key >> 3, body));
    }
    (pos == buf.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_the_top_level_fields() {
        // field 1 varint 150, field 6 varint 0xFFFFFFFF, field 2 bytes "ab", field 3 fixed64
        let msg = [
            0x08, 0x96, 0x01, 0x30, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x02, b'a', b'b', 0x19, 1,
            2, 3, 4, 5, 6, 7, 8,
        ];
        let f = fields(&msg).unwrap();
        assert_eq!(
            f.iter().map(|(n, b)| (*n, *b)).collect::<Vec<_>>(),
            [(1, &b""[..]), (6, b""), (2, b"ab"), (3, b"")]
        );
        for cut in 1..msg.len() {
            if ![3, 9, 13].contains(&cut) {
                assert_eq!(fields(&msg[..cut]), None, "cut at {cut}");
            }
        }
    }
}
