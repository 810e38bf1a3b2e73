//! The little HTTP/1.1 needed for `--target http`: the request for idgen's HTTP ID API
//! (`POST /ids`, or `POST /ids/batch` with `{"count": N}`), and the responses' framing (head
//! parsed by `httparse`, body by `Content-Length`) and IDs. Requests are pipelined on
//! keep-alive connections, so answers come back in request order.

use serde::Deserialize;

/// Most header lines read in a response.
const MAX_HEADERS: usize = 32;
/// Largest response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest response body accepted (a batch of 65536 IDs in both forms is about 2.6 MB).
const MAX_BODY: usize = 8 << 20;

/// The request of every call of the run, with `host` in the Host header.
pub fn encode_request(host: &str, batch: u32, buf: &mut Vec<u8>) {
    encode_request_at(host, "/ids", batch, buf);
}

/// The request of every call of the run to `path` (`/ids`, or a named sequence's
/// `/seq/NAME`), or its `/batch` for a batch, with `host` in the Host header.
pub fn encode_request_at(host: &str, path: &str, batch: u32, buf: &mut Vec<u8>) {
    if batch == 1 {
        buf.extend_from_slice(
            format!("POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: 0\r\n\r\n").as_bytes(),
        );
    } else {
        let body = format!("{{\"count\":{batch}}}");
        buf.extend_from_slice(
            format!(
                "POST {path}/batch HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }
}

/// One response, framed.
#[derive(Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub status: u16,
    /// `Connection: close`: the server closes the connection after this response.
    pub close: bool,
    pub body: &'a [u8],
}

/// Parses one response from the start of `buf`: `Ok(None)` if incomplete, `Err` with a
/// description if the bytes are not an HTTP/1.1 response this client can frame (a body
/// without `Content-Length` included: idgen always sends one).
pub fn parse_response(buf: &[u8]) -> Result<Option<(Response<'_>, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > MAX_HEAD {
                return Err(format!(
                    "no end of the response head within {MAX_HEAD} bytes"
                ));
            }
            return Ok(None);
        }
        Err(e) => return Err(format!("not an HTTP/1.1 response: {e}")),
    };
    let status = response.code.unwrap_or(0);
    let mut length = None;
    let mut close = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    format!("bad Content-Length {:?}", String::from_utf8_lossy(h.value))
                })?;
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("a chunked (Transfer-Encoding) response: expected Content-Length".into());
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h
                .value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
    }
    let length = length.ok_or("a response without Content-Length")?;
    if length > MAX_BODY {
        return Err(format!("a body of {length} bytes (at most {MAX_BODY})"));
    }
    let Some(body) = buf.get(head_len..head_len + length) else {
        return Ok(None);
    };
    Ok(Some((
        Response {
            status,
            close,
            body,
        },
        head_len + length,
    )))
}

#[derive(Deserialize)]
struct Single {
    #[serde(alias = "value")]
    id: u64,
}

#[derive(Deserialize)]
struct Batch {
    #[serde(alias = "values")]
    ids: Vec<u64>,
}

/// The IDs of a 200 answer: `{"id": N, ..}` for `POST /ids` (`batch` 1), else
/// `{"ids": [..], ..}` (the string forms next to them are not read); a named sequence's
/// `{"value": N, ..}` and `{"values": [..], ..}` likewise.
pub fn parse_ids(body: &[u8], batch: u32) -> Result<Vec<u64>, String> {
    if batch == 1 {
        serde_json::from_slice::<Single>(body)
            .map(|s| vec![s.id])
            .map_err(|e| format!("not {{\"id\": N, ..}}: {e}"))
    } else {
        serde_json::from_slice::<Batch>(body)
            .map(|b| b.ids)
            .map_err(|e| format!("not {{\"ids\": [..], ..}}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_requests_and_answers() {
        let mut buf = Vec::new();
        encode_request_at("h:1", "/seq/orders", 1, &mut buf);
        assert_eq!(
            buf,
            b"POST /seq/orders HTTP/1.1\r\nhost: h:1\r\ncontent-length: 0\r\n\r\n"
        );
        buf.clear();
        encode_request_at("h:1", "/seq/orders", 3, &mut buf);
        assert!(buf.starts_with(b"POST /seq/orders/batch HTTP/1.1\r\n"));
        assert!(buf.ends_with(b"\r\n\r\n{\"count\":3}"));
        assert_eq!(parse_ids(br#"{"value":7,"value_str":"7"}"#, 1), Ok(vec![7]));
        assert_eq!(
            parse_ids(br#"{"values":[7,8],"values_str":["7","8"]}"#, 2),
            Ok(vec![7, 8])
        );
    }

    #[test]
    fn requests() {
        let mut buf = Vec::new();
        encode_request("127.0.0.1:7422", 1, &mut buf);
        assert_eq!(
            buf,
            b"POST /ids HTTP/1.1\r\nhost: 127.0.0.1:7422\r\ncontent-length: 0\r\n\r\n"
        );
        buf.clear();
        encode_request("h:1", 4096, &mut buf);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "POST /ids/batch HTTP/1.1\r\nhost: h:1\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{\"count\":4096}"
        );
    }

    #[test]
    fn responses_are_framed_by_content_length() {
        let one = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 8\r\n\r\n{\"id\":7}";
        for cut in 0..one.len() {
            assert_eq!(parse_response(&one[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = one.to_vec();
        two.extend_from_slice(
            b"HTTP/1.1 503 Service Unavailable\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\n{}",
        );
        let (r, used) = parse_response(&two).unwrap().unwrap();
        assert_eq!(
            r,
            Response {
                status: 200,
                close: false,
                body: b"{\"id\":7}"
            }
        );
        assert_eq!(used, one.len());
        let (r, used2) = parse_response(&two[used..]).unwrap().unwrap();
        assert_eq!((r.status, r.close, r.body), (503, true, &b"{}"[..]));
        assert_eq!(used + used2, two.len());
    }

    #[test]
    fn unframeable_responses_are_errors() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n",
            b"\x00\x00\x00\x01",
        ] {
            assert!(
                parse_response(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_response(&vec![b'a'; MAX_HEAD + 1]).is_err());
    }

    #[test]
    fn ids() {
        assert_eq!(
            parse_ids(
                br#"{"id":121281315407396864,"id_str":"121281315407396864"}"#,
                1
            ),
            Ok(vec![121281315407396864])
        );
        assert_eq!(
            parse_ids(br#"{"ids":[5,6],"ids_str":["5","6"]}"#, 2),
            Ok(vec![5, 6])
        );
        assert!(parse_ids(br#"{"id":"5"}"#, 1).is_err());
        assert!(parse_ids(br#"{"ids":[-1]}"#, 2).is_err());
        assert!(parse_ids(b"", 2).is_err());
    }
}
