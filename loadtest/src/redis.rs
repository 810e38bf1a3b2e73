//! The little RESP needed for `--target redis`: encode `INCRBY key batch`, parse the
//! integer (or error) reply.

/// Longest reply line accepted (an integer or an error message).
const MAX_LINE: usize = 4096;

/// A parsed reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// `:<n>\r\n`: the key's value after the increment.
    Integer(i64),
    /// `-<message>\r\n`.
    Error(String),
}

/// Append `*3\r\n$6\r\nINCRBY\r\n$<len>\r\n<key>\r\n$<len>\r\n<batch>\r\n` to `buf`.
pub fn encode_incrby(key: &str, batch: u32, buf: &mut Vec<u8>) {
    let batch = batch.to_string();
    buf.extend_from_slice(b"*3\r\n$6\r\nINCRBY\r\n");
    for arg in [key.as_bytes(), batch.as_bytes()] {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Parse one reply from the start of `buf`: `Ok(None)` if incomplete, `Err` with a
/// description if the bytes are not an integer or error reply.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if kind != b':' && kind != b'-' {
        return Err(format!(
            "expected a RESP integer (':') or error ('-') reply, got type byte {:?}",
            kind as char
        ));
    }
    let window = &buf[..buf.len().min(MAX_LINE)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if buf.len() >= MAX_LINE {
            return Err(format!("no CRLF within {MAX_LINE} bytes"));
        }
        return Ok(None);
    };
    match buf.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err("CR not followed by LF".into()),
    }
    let line = &buf[1..cr];
    let reply = if kind == b':' {
        let n = std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("bad RESP integer {:?}", String::from_utf8_lossy(line)))?;
        Reply::Integer(n)
    } else {
        Reply::Error(String::from_utf8_lossy(line).into_owned())
    };
    Ok(Some((reply, cr + 2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incrby_encoding() {
        let mut buf = Vec::new();
        encode_incrby("idgen-loadtest", 4096, &mut buf);
        assert_eq!(
            buf,
            b"*3\r\n$6\r\nINCRBY\r\n$14\r\nidgen-loadtest\r\n$4\r\n4096\r\n"
        );
    }

    #[test]
    fn replies() {
        assert_eq!(parse_reply(b""), Ok(None));
        assert_eq!(parse_reply(b":12"), Ok(None));
        assert_eq!(parse_reply(b":12\r"), Ok(None));
        assert_eq!(
            parse_reply(b":12\r\n:13\r\n"),
            Ok(Some((Reply::Integer(12), 5)))
        );
        assert_eq!(parse_reply(b":-3\r\n"), Ok(Some((Reply::Integer(-3), 5))));
        assert_eq!(
            parse_reply(b"-ERR value is not an integer\r\n"),
            Ok(Some((
                Reply::Error("ERR value is not an integer".into()),
                30
            )))
        );
        assert!(parse_reply(b"+OK\r\n").is_err());
        assert!(parse_reply(b":1x\r\n").is_err());
        assert!(parse_reply(b":1\rx").is_err());
        assert!(parse_reply(&[b':'; 5000]).is_err());
    }
}
