//! Whether the bytes a connection has read belong to a request, so that a
//! connection is never closed for a newcomer once a request has started
//! arriving. No I/O: the connection's reader [feeds](RequestBytes::feed)
//! every byte it reads, after TLS, in order.
//!
//! HTTP/1.1: every byte is part of a request (headers or body). HTTP/2: only
//! the frames that carry a request's header block (`HEADERS`,
//! `CONTINUATION`; `PUSH_PROMISE`, which a client may not send, counted the
//! same way) are; the connection preface, `SETTINGS`, `PING`,
//! `WINDOW_UPDATE` and the rest are not, nor is `DATA` (a request's body
//! follows its headers, which already made the request start). A frame
//! header read only in part may be a request's: until it is whole, the
//! connection is [mid-request](RequestBytes::mid_request).

/// Length of the HTTP/2 client connection preface (RFC 9113 section 3.4),
/// bytes.
const H2_PREFACE_LEN: usize = 24;

/// Length of an HTTP/2 frame header (RFC 9113 section 4.1), bytes.
const H2_FRAME_HEADER_LEN: usize = 9;

/// HTTP/2 frame types that carry a header block (RFC 9113 section 6).
const H2_HEADERS: u8 = 0x1;
const H2_PUSH_PROMISE: u8 = 0x5;
const H2_CONTINUATION: u8 = 0x9;

/// HTTP/2 `END_HEADERS` flag of a header-block frame.
const H2_END_HEADERS: u8 = 0x4;

/// Reads a connection's incoming bytes as request bytes or not.
#[derive(Debug)]
pub enum RequestBytes {
    /// HTTP/1.1: every byte is a request's.
    Http1,
    /// HTTP/2: where the reader is in the frame stream.
    Http2(H2Frames),
}

/// Position in an HTTP/2 client's frame stream.
#[derive(Debug, Default)]
pub struct H2Frames {
    /// Preface bytes read so far (the preface is not a request).
    preface: usize,
    /// The current frame header, as far as read.
    header: [u8; H2_FRAME_HEADER_LEN],
    /// How much of `header` is read; 0 at a frame boundary or in a payload.
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// Whether the current frame carries a header block.
    request_frame: bool,
    /// Whether a header block has started and its `END_HEADERS` not come.
    block_open: bool,
}

impl RequestBytes {
    /// For a connection speaking HTTP/2 (`h2`) or HTTP/1.1.
    pub fn new(h2: bool) -> Self {
        if h2 {
            Self::Http2(H2Frames::default())
        } else {
            Self::Http1
        }
    }

    /// Take in the next bytes read; whether any of them belong to a
    /// request.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        match self {
            Self::Http1 => !bytes.is_empty(),
            Self::Http2(frames) => frames.feed(bytes),
        }
    }

    /// Whether the bytes read so far stop inside what is or may be a
    /// request: an HTTP/2 frame header read in part, a header-block frame
    /// read in part, or a header block without its end. Never for HTTP/1.1,
    /// whose every byte [`Self::feed`] reports.
    pub fn mid_request(&self) -> bool {
        match self {
            Self::Http1 => false,
            Self::Http2(f) => {
                f.header_len > 0 || (f.payload_left > 0 && f.request_frame) || f.block_open
            }
        }
    }
}

impl H2Frames {
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let mut request = false;
        while !bytes.is_empty() {
            if self.preface < H2_PREFACE_LEN {
                let n = (H2_PREFACE_LEN - self.preface).min(bytes.len());
                self.preface += n;
                bytes = &bytes[n..];
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                request |= self.request_frame;
                bytes = &bytes[n..];
            } else {
                let n = (H2_FRAME_HEADER_LEN - self.header_len).min(bytes.len());
                let (head, rest) = bytes.split_at(n);
                self.header[self.header_len..self.header_len + n].copy_from_slice(head);
                self.header_len += n;
                bytes = rest;
                if self.header_len == H2_FRAME_HEADER_LEN {
                    self.header_len = 0;
                    let [l0, l1, l2, kind, flags, ..] = self.header;
                    self.payload_left =
                        usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
                    self.request_frame =
                        matches!(kind, H2_HEADERS | H2_PUSH_PROMISE | H2_CONTINUATION);
                    if self.request_frame {
                        request = true;
                        self.block_open = flags & H2_END_HEADERS == 0;
                    }
                }
            }
        }
        request
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn every_http1_byte_is_a_request_byte() {
        let mut r = RequestBytes::new(false);
        assert!(!r.feed(b""));
        assert!(r.feed(b"G"));
        assert!(!r.mid_request());
    }

    #[test]
    fn the_http2_preface_settings_and_pings_are_not_a_request() {
        let mut r = RequestBytes::new(true);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, &[0, 4, 0, 0, 0, 0]));
        bytes.extend(frame(0x6, 0, &[0; 8]));
        bytes.extend(frame(0x8, 0, &[0, 0, 1, 0]));
        // Byte by byte as at once.
        for b in &bytes {
            assert!(!r.feed(std::slice::from_ref(b)));
        }
        assert!(!r.mid_request());
    }

    #[test]
    fn a_partial_frame_header_may_be_a_request() {
        let mut r = RequestBytes::new(true);
        assert!(!r.feed(PREFACE));
        let settings = frame(0x4, 0x1, &[]);
        assert!(!r.feed(&settings[..4]));
        assert!(r.mid_request());
        assert!(!r.feed(&settings[4..]));
        assert!(!r.mid_request());
    }

    #[test]
    fn a_headers_frame_is_a_request_from_its_header_to_its_end() {
        let mut r = RequestBytes::new(true);
        r.feed(PREFACE);
        let headers = frame(0x1, 0x4 | 0x1, b"block");
        assert!(r.feed(&headers[..9]));
        assert!(r.mid_request());
        assert!(r.feed(&headers[9..]));
        assert!(!r.mid_request());
        // DATA after it is not a new request.
        assert!(!r.feed(&frame(0x0, 0x1, b"body")));
        assert!(!r.mid_request());
    }

    #[test]
    fn a_header_block_is_open_until_end_headers() {
        let mut r = RequestBytes::new(true);
        r.feed(PREFACE);
        assert!(r.feed(&frame(0x1, 0, b"part")));
        assert!(r.mid_request());
        assert!(r.feed(&frame(0x9, 0, b"more")));
        assert!(r.mid_request());
        assert!(r.feed(&frame(0x9, 0x4, b"end")));
        assert!(!r.mid_request());
    }
}
