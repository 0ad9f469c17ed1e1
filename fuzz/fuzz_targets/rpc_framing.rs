//! The JSON-RPC stream framing (`rpc::framing::Scanner`) as the socket servers use it: bytes
//! arrive in arbitrary pieces, complete values are cut out, consumed bytes are dropped and the
//! scanner rebased.
//!
//! Input: `[piece-size seed]` then the stream.
//! Properties: nothing panics; feeding the stream in pieces (with rebasing) finds exactly the
//! values, and the first error, that one pass over the whole stream finds; every complete
//! value is accepted by serde_json unless it breaks a rule the scanner leaves to the decoder
//! (UTF-8, lone surrogates, number range, nesting); and the scanner never rejects a value
//! that serde_json accepts, unless it holds more than SPDK's 8192 JSON values.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpc::framing::{Scan, Scanner};

#[derive(Debug, PartialEq, Eq)]
enum Ev {
    Value(Vec<u8>),
    Invalid,
}

fn whole(stream: &[u8]) -> Vec<Ev> {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    loop {
        match s.next(stream) {
            Scan::Complete { start, end } => out.push(Ev::Value(stream[start..end].to_vec())),
            Scan::NeedMore => return out,
            Scan::Invalid => {
                out.push(Ev::Invalid);
                return out;
            }
        }
    }
}

fn pieces(stream: &[u8], seed: u8) -> Vec<Ev> {
    let mut s = Scanner::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut x = u32::from(seed) | 1;
    while pos < stream.len() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (x as usize % 17 + 1).min(stream.len() - pos);
        buf.extend_from_slice(&stream[pos..pos + n]);
        pos += n;
        loop {
            match s.next(&buf) {
                Scan::Complete { start, end } => out.push(Ev::Value(buf[start..end].to_vec())),
                Scan::NeedMore => break,
                Scan::Invalid => {
                    out.push(Ev::Invalid);
                    return out;
                }
            }
        }
        let c = s.consumed();
        buf.drain(..c);
        s.rebase(c);
    }
    out
}

/// JSON values as SPDK (and the scanner) count them: scalars, keys, and each bracket.
fn spdk_values(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 2 + a.iter().map(spdk_values).sum::<usize>(),
        serde_json::Value::Object(o) => 2 + o.values().map(|x| 1 + spdk_values(x)).sum::<usize>(),
        _ => 1,
    }
}

fn tolerated(e: &serde_json::Error) -> bool {
    let m = e.to_string();
    m.contains("surrogate")
        || m.contains("number out of range")
        || m.contains("recursion limit")
        || m.contains("invalid unicode code point")
        || m.contains("EOF while parsing")
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let a = whole(stream);
    let b = pieces(stream, seed);
    assert_eq!(a, b, "piecewise scanning differs from one pass");
    for ev in &a {
        if let Ev::Value(v) = ev
            && std::str::from_utf8(v).is_ok()
            && let Err(e) = serde_json::from_slice::<serde_json::Value>(v)
        {
            assert!(
                tolerated(&e),
                "scanner accepted what serde_json refuses: {e}"
            );
        }
    }
    // A value serde_json accepts at the point where the scanner gave up is a scanner bug.
    if a.last() == Some(&Ev::Invalid) {
        let done: usize = a
            .iter()
            .filter_map(|e| match e {
                Ev::Value(v) => Some(v.len()),
                Ev::Invalid => None,
            })
            .count();
        let mut de = serde_json::Deserializer::from_slice(stream).into_iter::<serde_json::Value>();
        let mut ok = 0;
        while let Some(Ok(v)) = de.next() {
            ok += 1;
            if ok > done && spdk_values(&v) <= Scanner::MAX_VALUES {
                panic!("the scanner refused value {ok}, which serde_json accepts");
            }
        }
    }
});
