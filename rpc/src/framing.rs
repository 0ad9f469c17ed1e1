//! SPDK stream framing, sans-I/O: find complete JSON values in a growing byte buffer.
//!
//! rpc.py writes pretty-printed requests with no delimiter; a request may arrive split over
//! many reads and several may arrive in one read. [`Scanner`] is a resumable JSON syntax
//! checker: fed the same buffer again after more bytes were appended, it continues where it
//! stopped (linear time even for byte-by-byte input) and reports where the next complete
//! top-level value ends, that more bytes are needed, or that the input can never become JSON
//! (so the connection gets `-32700` at the first bad byte instead of waiting for the size cap).
//!
//! It checks structure only; UTF-8 validity and number ranges are checked when the complete
//! value is decoded. Like SPDK it refuses a value of more than [`Scanner::MAX_VALUES`] JSON
//! values (scalars, keys, and each bracket counted once), which also bounds how many calls a
//! batch can carry, and so how much one request can make the server compute and answer.

/// What the scanner found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// `buf[start..end]` is one complete top-level JSON value.
    Complete {
        /// Offset of the value's first byte.
        start: usize,
        /// Offset one past the value's last byte.
        end: usize,
    },
    /// The buffer ends inside a value (or holds only whitespace): read more.
    NeedMore,
    /// The bytes can never form JSON: answer `-32700` and close.
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Object,
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    Backslash,
    Unicode(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Between top-level values.
    Idle,
    /// A value must follow (after `:` or `,` in an array, or at the top level).
    Value,
    /// Just after `[`: a value or `]`.
    ArrayFirst,
    /// Just after `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    ObjectKey,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or the closing bracket.
    After,
    /// Inside a string (`key` tells whether it is an object key).
    Str { key: bool, esc: Esc },
    /// Inside a number.
    Number(Num),
    /// Inside `true`, `false` or `null`.
    Literal { word: &'static [u8], idx: u8 },
}

/// Resumable scanner for concatenated JSON values. See the module docs.
#[derive(Debug)]
pub struct Scanner {
    pos: usize,
    start: Option<usize>,
    stack: Vec<Container>,
    state: St,
    max_depth: usize,
    /// JSON values seen so far in the current top-level value.
    values: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

const fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    /// Nesting limit: serde_json refuses deeper input anyway (its recursion limit is 128).
    pub const MAX_DEPTH: usize = 128;

    /// Most JSON values one top-level value may hold (SPDK's `SPDK_JSONRPC_MAX_VALUES`: more
    /// is a parse error). Counted as SPDK's parser counts them: every scalar, every object
    /// key, and each `[`, `]`, `{` and `}`.
    pub const MAX_VALUES: usize = 8192;

    /// A scanner positioned at the start of an empty buffer.
    pub fn new() -> Self {
        Self {
            pos: 0,
            start: None,
            stack: Vec::new(),
            state: St::Idle,
            max_depth: Self::MAX_DEPTH,
            values: 0,
        }
    }

    /// Counts one more JSON value of the current top-level value.
    fn count(&mut self) -> bool {
        self.values += 1;
        self.values <= Self::MAX_VALUES
    }

    /// Bytes at the front of the buffer that belong to no pending value (already reported
    /// values and whitespace). The caller may drop them and then call [`Scanner::rebase`].
    pub fn consumed(&self) -> usize {
        self.start.unwrap_or(self.pos)
    }

    /// Tell the scanner that the first `n` bytes (at most [`Scanner::consumed`]) were removed
    /// from the buffer.
    pub fn rebase(&mut self, n: usize) {
        let n = n.min(self.consumed());
        self.pos -= n;
        if let Some(s) = self.start.as_mut() {
            *s -= n;
        }
    }

    /// Whether the scanner is inside a value (bytes of an incomplete value are buffered).
    pub fn in_value(&self) -> bool {
        self.start.is_some()
    }

    /// Continue scanning `buf` (the same buffer as before, possibly with bytes appended).
    pub fn next(&mut self, buf: &[u8]) -> Scan {
        while let Some(&b) = buf.get(self.pos) {
            match self.step(b) {
                Step::Consume => self.pos += 1,
                Step::Done { consume } => {
                    let end = if consume { self.pos + 1 } else { self.pos };
                    let start = self.start.take().unwrap_or(self.pos);
                    self.pos = end;
                    self.state = St::Idle;
                    return Scan::Complete { start, end };
                }
                Step::Invalid => return Scan::Invalid,
            }
        }
        Scan::NeedMore
    }

    /// Advance over one byte.
    fn step(&mut self, b: u8) -> Step {
        match self.state {
            St::Idle => {
                if is_ws(b) {
                    return Step::Consume;
                }
                self.start = Some(self.pos);
                self.state = St::Value;
                self.values = 0;
                self.begin_value(b)
            }
            St::Value => {
                if is_ws(b) {
                    return Step::Consume;
                }
                self.begin_value(b)
            }
            St::ArrayFirst => {
                if is_ws(b) {
                    Step::Consume
                } else if b == b']' {
                    self.close()
                } else {
                    self.begin_value(b)
                }
            }
            St::ObjectFirst | St::ObjectKey => {
                if is_ws(b) {
                    Step::Consume
                } else if b == b'"' {
                    if !self.count() {
                        return Step::Invalid;
                    }
                    self.state = St::Str {
                        key: true,
                        esc: Esc::None,
                    };
                    Step::Consume
                } else if b == b'}' && self.state == St::ObjectFirst {
                    self.close()
                } else {
                    Step::Invalid
                }
            }
            St::Colon => {
                if is_ws(b) {
                    Step::Consume
                } else if b == b':' {
                    self.state = St::Value;
                    Step::Consume
                } else {
                    Step::Invalid
                }
            }
            St::After => {
                if is_ws(b) {
                    return Step::Consume;
                }
                match (b, self.stack.last()) {
                    (b',', Some(Container::Object)) => {
                        self.state = St::ObjectKey;
                        Step::Consume
                    }
                    (b',', Some(Container::Array)) => {
                        self.state = St::Value;
                        Step::Consume
                    }
                    (b'}', Some(Container::Object)) | (b']', Some(Container::Array)) => {
                        self.close()
                    }
                    _ => Step::Invalid,
                }
            }
            St::Str { key, esc } => self.string_byte(key, esc, b),
            St::Number(n) => self.number_byte(n, b),
            St::Literal { word, idx } => {
                if word.get(usize::from(idx)) != Some(&b) {
                    return Step::Invalid;
                }
                let idx = idx + 1;
                if usize::from(idx) == word.len() {
                    self.value_done()
                } else {
                    self.state = St::Literal { word, idx };
                    Step::Consume
                }
            }
        }
    }

    fn begin_value(&mut self, b: u8) -> Step {
        if !self.count() {
            return Step::Invalid;
        }
        self.state = match b {
            b'{' | b'[' => {
                if self.stack.len() >= self.max_depth {
                    return Step::Invalid;
                }
                if b == b'{' {
                    self.stack.push(Container::Object);
                    St::ObjectFirst
                } else {
                    self.stack.push(Container::Array);
                    St::ArrayFirst
                }
            }
            b'"' => St::Str {
                key: false,
                esc: Esc::None,
            },
            b'-' => St::Number(Num::Minus),
            b'0' => St::Number(Num::Zero),
            b'1'..=b'9' => St::Number(Num::Int),
            b't' => St::Literal {
                word: b"true",
                idx: 1,
            },
            b'f' => St::Literal {
                word: b"false",
                idx: 1,
            },
            b'n' => St::Literal {
                word: b"null",
                idx: 1,
            },
            _ => return Step::Invalid,
        };
        Step::Consume
    }

    fn close(&mut self) -> Step {
        if !self.count() {
            return Step::Invalid;
        }
        self.stack.pop();
        self.value_done()
    }

    /// A value ended with the current byte.
    fn value_done(&mut self) -> Step {
        if self.stack.is_empty() {
            return Step::Done { consume: true };
        }
        self.state = St::After;
        Step::Consume
    }

    /// A number ended just before the current byte `b`, which belongs to what follows.
    fn number_done(&mut self, b: u8) -> Step {
        if self.stack.is_empty() {
            return Step::Done { consume: false };
        }
        self.state = St::After;
        self.step(b)
    }

    fn string_byte(&mut self, key: bool, esc: Esc, b: u8) -> Step {
        let esc = match esc {
            Esc::None => match b {
                b'"' => {
                    if key {
                        self.state = St::Colon;
                        return Step::Consume;
                    }
                    return self.value_done();
                }
                b'\\' => Esc::Backslash,
                0x00..=0x1f => return Step::Invalid,
                _ => Esc::None,
            },
            Esc::Backslash => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Esc::None,
                b'u' => Esc::Unicode(4),
                _ => return Step::Invalid,
            },
            Esc::Unicode(n) => {
                if !b.is_ascii_hexdigit() {
                    return Step::Invalid;
                }
                if n == 1 {
                    Esc::None
                } else {
                    Esc::Unicode(n - 1)
                }
            }
        };
        self.state = St::Str { key, esc };
        Step::Consume
    }

    fn number_byte(&mut self, n: Num, b: u8) -> Step {
        let next = match (n, b) {
            (Num::Minus, b'0') => Num::Zero,
            (Num::Minus, b'1'..=b'9') => Num::Int,
            (Num::Int, b'0'..=b'9') => Num::Int,
            (Num::Zero | Num::Int, b'.') => Num::Dot,
            (Num::Dot | Num::Frac, b'0'..=b'9') => Num::Frac,
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Num::Exp,
            (Num::Exp, b'+' | b'-') => Num::ExpSign,
            (Num::Exp | Num::ExpSign | Num::ExpDigits, b'0'..=b'9') => Num::ExpDigits,
            (Num::Zero | Num::Int | Num::Frac | Num::ExpDigits, _) => {
                // The number ended before this byte; the byte belongs to what follows.
                return self.number_done(b);
            }
            _ => return Step::Invalid,
        };
        self.state = St::Number(next);
        Step::Consume
    }
}

enum Step {
    Consume,
    Done { consume: bool },
    Invalid,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `input` one byte at a time and collect every result until the input is used up.
    fn scan_bytewise(input: &[u8]) -> Vec<Scan> {
        let mut sc = Scanner::new();
        let mut out = Vec::new();
        for n in 1..=input.len() {
            loop {
                match sc.next(&input[..n]) {
                    Scan::NeedMore => break,
                    r @ Scan::Invalid => {
                        out.push(r);
                        return out;
                    }
                    r => out.push(r),
                }
            }
        }
        out.push(Scan::NeedMore);
        out
    }

    fn scan_whole(input: &[u8]) -> Vec<Scan> {
        let mut sc = Scanner::new();
        let mut out = Vec::new();
        loop {
            let r = sc.next(input);
            out.push(r);
            if !matches!(r, Scan::Complete { .. }) {
                return out;
            }
        }
    }

    fn values(input: &str) -> Vec<&str> {
        scan_whole(input.as_bytes())
            .into_iter()
            .filter_map(|r| match r {
                Scan::Complete { start, end } => Some(&input[start..end]),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn more_than_spdks_value_limit_is_a_parse_error() {
        // A request counts 8 values: {, 3 keys, 3 values, }. An array of n of them counts
        // 8n + 2.
        let one = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;
        let batch = |n: usize| format!("[{}]", vec![one; n].join(","));
        let fits = batch((Scanner::MAX_VALUES - 2) / 8);
        assert_eq!(
            scan_whole(fits.as_bytes())[0],
            Scan::Complete {
                start: 0,
                end: fits.len()
            }
        );
        let over = batch((Scanner::MAX_VALUES - 2) / 8 + 1);
        assert_eq!(scan_whole(over.as_bytes()), vec![Scan::Invalid]);
        assert_eq!(scan_bytewise(over.as_bytes()), vec![Scan::Invalid]);
        // The count starts afresh with each top-level value.
        let two = format!("{fits}{fits}");
        assert_eq!(values(&two).len(), 2);
        // Keys and scalars count too, not only containers.
        let wide = format!(
            "{{{}}}",
            (0..4096)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(scan_whole(wide.as_bytes()), vec![Scan::Invalid]);
    }

    #[test]
    fn concatenated_pretty_requests() {
        let a = "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"rpc_get_methods\",\n  \"id\": 1\n}";
        let b = "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"x\",\n  \"params\": {\"a\": [1, -2.5e+3, true, null, \"}\\\"]\"]},\n  \"id\": 2\n}";
        let input = format!("  {a}\n{b}[{{}}]{{}}");
        assert_eq!(values(&input), vec![a, b, "[{}]", "{}"]);
        assert_eq!(
            scan_bytewise(input.as_bytes()),
            scan_whole(input.as_bytes())
        );
    }

    #[test]
    fn top_level_scalars_end_at_delimiters() {
        assert_eq!(values("12 \"s\" true{}"), vec!["12", "\"s\"", "true", "{}"]);
        // A bare number at the end of the buffer may still grow.
        assert_eq!(Scanner::new().next(b"12"), Scan::NeedMore);
        assert_eq!(values("-0.5e-3]"), vec!["-0.5e-3"]);
    }

    #[test]
    fn invalid_input_is_detected_at_the_bad_byte() {
        for bad in [
            "}",
            "x",
            "{\"a\" 1}",
            "{\"a\":}",
            "[1,]",
            "{,}",
            "{\"a\":1,}",
            "[1 2]",
            "{1:2}",
            "\"a\u{1}\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "[01]",
            "-a",
            "1.e",
            "1e+",
            "tru e",
            "nul",
            "{\"a\":1]",
            "[1}",
            "{]",
        ] {
            let input = format!("{bad} ");
            let mut sc = Scanner::new();
            let mut got = sc.next(input.as_bytes());
            if matches!(got, Scan::Complete { .. }) {
                got = sc.next(input.as_bytes());
            }
            assert_eq!(got, Scan::Invalid, "{bad:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(bad).is_err(),
                "{bad:?}"
            );
        }
        // Garbage right after a complete value is reported on the next call.
        let mut sc = Scanner::new();
        assert_eq!(sc.next(b"{}x"), Scan::Complete { start: 0, end: 2 });
        assert_eq!(sc.next(b"{}x"), Scan::Invalid);
    }

    #[test]
    fn truncated_prefixes_need_more() {
        let doc = r#"{"a":[1.5e3,-0,"x\u00e9\n",true,false,null,{}],"b":{"c":[]}}"#;
        for n in 0..doc.len() {
            assert_eq!(
                Scanner::new().next(&doc.as_bytes()[..n]),
                Scan::NeedMore,
                "prefix {n}"
            );
        }
        assert_eq!(
            Scanner::new().next(doc.as_bytes()),
            Scan::Complete {
                start: 0,
                end: doc.len()
            }
        );
    }

    #[test]
    fn depth_limit() {
        let deep = "[".repeat(Scanner::MAX_DEPTH + 1);
        assert_eq!(Scanner::new().next(deep.as_bytes()), Scan::Invalid);
        let ok = format!(
            "{}{}",
            "[".repeat(Scanner::MAX_DEPTH),
            "]".repeat(Scanner::MAX_DEPTH)
        );
        assert!(matches!(
            Scanner::new().next(ok.as_bytes()),
            Scan::Complete { .. }
        ));
    }

    #[test]
    fn rebase_after_draining() {
        let mut buf = b"{\"a\":1} {\"b\"".to_vec();
        let mut sc = Scanner::new();
        assert_eq!(sc.next(&buf), Scan::Complete { start: 0, end: 7 });
        assert_eq!(sc.next(&buf), Scan::NeedMore);
        assert!(sc.in_value());
        let n = sc.consumed();
        assert_eq!(n, 8);
        buf.drain(..n);
        sc.rebase(n);
        buf.extend_from_slice(b":2}");
        assert_eq!(sc.next(&buf), Scan::Complete { start: 0, end: 7 });
        assert_eq!(&buf[..7], b"{\"b\":2}");
    }

    /// Cross-check against serde_json on mutated documents (deterministic xorshift "fuzzing").
    #[test]
    fn agrees_with_serde_json_on_mutations() {
        let seeds = [
            r#"{"jsonrpc":"2.0","method":"nvmf_create_subsystem","params":{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":true,"max":-12.5E+2},"id":1}"#,
            r#"[{"method":"a","id":"x"},{"method":"b","params":[1,2,{"c":null}]},[],{}]"#,
        ];
        let alphabet = b"{}[],:\"\\ 0123456789-+.eEtrufalsn\n";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let seed = seeds[(rand() % 2) as usize].as_bytes();
            let mut doc = seed.to_vec();
            for _ in 0..(rand() % 3 + 1) {
                let pos = 1 + (rand() as usize) % (doc.len() - 1);
                let c = alphabet[(rand() as usize) % alphabet.len()];
                match rand() % 3 {
                    0 => doc[pos] = c,
                    1 => doc.insert(pos, c),
                    _ => {
                        doc.remove(pos);
                    }
                }
            }
            let text = std::str::from_utf8(&doc).unwrap();
            let mut stream =
                serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
            let serde = stream.next();
            let ours = Scanner::new().next(&doc);
            match (&serde, ours) {
                (Some(Ok(_)), Scan::Complete { start: 0, end }) => {
                    assert_eq!(end, stream.byte_offset(), "{text}")
                }
                (Some(Err(e)), Scan::Invalid) => assert!(!e.is_eof(), "{text}: {e}"),
                (Some(Err(_)), Scan::NeedMore) => {}
                _ => panic!("disagree on {text:?}: serde {serde:?}, scanner {ours:?}"),
            }
            assert_eq!(scan_bytewise(&doc), scan_whole(&doc), "{text}");
        }
    }
}
