#!/usr/bin/env python3
"""Independent DH-HMAC-CHAP reference values for rtgt's tests (target-core/src/nvme/auth).

Written from the NVMe base specification 2.0 section 8.13 and RFC 7919 with nothing but the
Python standard library (hashlib, hmac, base64, zlib, decimal, pow): it shares no code with the
Rust implementation it checks. `vectors.rs` runs it with a JSON list of cases on stdin and
compares the JSON list of results it prints.

Case kinds (hex strings for bytes):
  dhhc1      {hash_id, key}                       -> {text}   DHHC-1 representation
  transform  {hash_id, key, nqn}                  -> {hex}    transformed key
  augmented  {digest, shared, challenge}          -> {hex}    augmented challenge
  response   {digest, hash_id, key, role, challenge, shared|null, seqnum, tid,
              hostnqn, subnqn}                    -> {hex}    R1 (role "host") or R2 ("ctrl")
  prime      {bits}                               -> {hex}    the ffdhe prime from RFC 7919's formula
  dh         {bits, x, y}                         -> {pub, shared}  2^x mod p, (2^y)^x mod p
  transcript {digest, hostnqn, subnqn, host_key, ctrl_key, challenge_msg, reply_msg,
              success1_msg, ctrl_exponent|null}   -> {checks: {...}}  a whole exchange re-verified
"""
import base64
import hashlib
import hmac
import json
import sys
import zlib
from decimal import Decimal, getcontext

HASHES = {1: hashlib.sha256, 2: hashlib.sha384, 3: hashlib.sha512}
# RFC 7919 Appendix A: p = 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1
FFDHE_X = {2048: 560316, 3072: 2625351, 4096: 5736041, 6144: 15705020, 8192: 10965728}
FFDHE_IDS = {1: 2048, 2: 3072, 3: 4096, 4: 6144, 5: 8192}
_primes = {}
_e = []


def prime(bits):
    if bits not in _primes:
        if not _e:
            getcontext().prec = 2600  # 8192 bits of e need ~2470 decimal digits
            _e.append(Decimal(1).exp())
        e = _e[0]
        floor = int((Decimal(2) ** (bits - 130) * e).to_integral_value(rounding="ROUND_FLOOR"))
        _primes[bits] = 2**bits - 2 ** (bits - 64) + (floor + FFDHE_X[bits]) * 2**64 - 1
    return _primes[bits]


def h(x):
    return bytes.fromhex(x)


def transform(hash_id, key, nqn):
    if hash_id == 0:
        return key
    return hmac.new(key, nqn.encode() + b"NVMe-over-Fabrics", HASHES[hash_id]).digest()


def augmented(digest, shared, challenge):
    hashed = HASHES[digest](shared).digest()
    return hmac.new(hashed, challenge, HASHES[digest]).digest()


def response(digest, hash_id, key, role, challenge, shared, seqnum, tid, hostnqn, subnqn):
    if role == "host":
        label, first, second = b"HostHost", hostnqn, subnqn
    else:
        label, first, second = b"Controller", subnqn, hostnqn
    tkey = transform(hash_id, key, first)
    if shared is not None:
        challenge = augmented(digest, shared, challenge)
    msg = (
        challenge
        + seqnum.to_bytes(4, "little")
        + tid.to_bytes(2, "little")
        + b"\x00"
        + label
        + first.encode()
        + b"\x00"
        + second.encode()
    )
    return hmac.new(tkey, msg, HASHES[digest]).digest()


def parse_dhhc1(text):
    _, hh, b64, _ = text.split(":")
    raw = base64.b64decode(b64)
    key, crc = raw[:-4], raw[-4:]
    assert zlib.crc32(key).to_bytes(4, "little") == crc
    return int(hh, 16), key


def transcript(c):
    """Re-verifies an exchange from its bytes, reading the fields at the kernel's offsets."""
    checks = {}
    ch, rp, s1 = h(c["challenge_msg"]), h(c["reply_msg"]), h(c["success1_msg"])
    checks["challenge_header"] = ch[0] == 1 and ch[1] == 1
    tid = int.from_bytes(ch[4:6], "little")
    hl, hash_id, dh_id = ch[6], ch[8], ch[9]
    dhvlen = int.from_bytes(ch[10:12], "little")
    seq1 = int.from_bytes(ch[12:16], "little")
    c1, ctrl_pub = ch[16 : 16 + hl], ch[16 + hl : 16 + hl + dhvlen]
    checks["challenge_len"] = len(ch) == 16 + hl + dhvlen
    checks["hash"] = hash_id == c["digest"] and hl == HASHES[hash_id]().digest_size
    checks["reply_header"] = rp[0] == 1 and rp[1] == 2 and int.from_bytes(rp[4:6], "little") == tid
    rhl, cvalid = rp[6], rp[8]
    rdhvlen = int.from_bytes(rp[10:12], "little")
    seq2 = int.from_bytes(rp[12:16], "little")
    r1, c2 = rp[16 : 16 + rhl], rp[16 + rhl : 16 + 2 * rhl]
    host_pub = rp[16 + 2 * rhl : 16 + 2 * rhl + rdhvlen]
    checks["reply_len"] = len(rp) == 16 + 2 * rhl + rdhvlen and rhl == hl
    shared = None
    if dh_id != 0:
        p = prime(FFDHE_IDS[dh_id])
        n = FFDHE_IDS[dh_id] // 8
        x = int(c["ctrl_exponent"], 16)
        checks["ctrl_pub"] = ctrl_pub == pow(2, x, p).to_bytes(n, "big")
        checks["host_pub_range"] = 1 < int.from_bytes(host_pub, "big") < p - 1
        shared = pow(int.from_bytes(host_pub, "big"), x, p).to_bytes(n, "big")
    else:
        checks["no_dh_values"] = dhvlen == 0 and rdhvlen == 0
    hh, hkey = parse_dhhc1(c["host_key"])
    want_r1 = response(hash_id, hh, hkey, "host", c1, shared, seq1, tid, c["hostnqn"], c["subnqn"])
    checks["r1"] = hmac.compare_digest(want_r1, r1)
    checks["success1_header"] = s1[0] == 1 and s1[1] == 3 and s1[6] == hl
    if c["ctrl_key"] is not None:
        ch_, ckey = parse_dhhc1(c["ctrl_key"])
        want_r2 = response(hash_id, ch_, ckey, "ctrl", c2, shared, seq2, tid, c["hostnqn"], c["subnqn"])
        checks["cvalid"] = cvalid == 1 and seq2 != 0
        checks["r2"] = s1[8] == 1 and s1[16 : 16 + hl] == want_r2 and len(s1) == 16 + hl
    else:
        checks["no_r2"] = cvalid == 0 and seq2 == 0 and s1[8] == 0 and len(s1) == 16
    return {"checks": checks}


def run(c):
    k = c["kind"]
    if k == "dhhc1":
        key = h(c["key"])
        raw = key + zlib.crc32(key).to_bytes(4, "little")
        return {"text": "DHHC-1:%02x:%s:" % (c["hash_id"], base64.b64encode(raw).decode())}
    if k == "transform":
        return {"hex": transform(c["hash_id"], h(c["key"]), c["nqn"]).hex()}
    if k == "augmented":
        return {"hex": augmented(c["digest"], h(c["shared"]), h(c["challenge"])).hex()}
    if k == "response":
        shared = None if c["shared"] is None else h(c["shared"])
        r = response(c["digest"], c["hash_id"], h(c["key"]), c["role"], h(c["challenge"]),
                     shared, c["seqnum"], c["tid"], c["hostnqn"], c["subnqn"])
        return {"hex": r.hex()}
    if k == "prime":
        return {"hex": "%X" % prime(c["bits"])}
    if k == "dh":
        p, n = prime(c["bits"]), c["bits"] // 8
        x, y = int(c["x"], 16), int(c["y"], 16)
        return {
            "pub": pow(2, x, p).to_bytes(n, "big").hex(),
            "shared": pow(pow(2, y, p), x, p).to_bytes(n, "big").hex(),
        }
    if k == "transcript":
        return transcript(c)
    raise ValueError("unknown case kind %r" % k)


def main():
    cases = json.load(sys.stdin)
    json.dump([run(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
