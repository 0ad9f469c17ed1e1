//! NVMe/RDMA connection-manager private data: the record a host sends with its connect request
//! (and the accept / reject records a host decodes). Whatever the bytes, decoding never
//! panics; an accepted record re-encodes to the same 32 bytes it came from; the size check
//! accepts exactly the sizes inside the limits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use transport_rdma::cm_data::{
    ConnectRequestData, RECORD_LEN, RejectStatus, accept_record, decode_accept,
};

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let (max_admin, max_io, max_qid) = (u32::from(b.u16()), u32::from(b.u16()), b.u16());
    let pdata = b.rest();
    let _ = RejectStatus::decode(pdata);
    if let Some(crqsize) = decode_accept(pdata) {
        assert_eq!(decode_accept(&accept_record(crqsize)), Some(crqsize));
    }
    let Ok(d) = ConnectRequestData::decode(pdata) else {
        return;
    };
    let enc = d.encode();
    assert_eq!(&enc[..10], &pdata[..10], "re-encoding changed the record");
    assert_eq!(ConnectRequestData::decode(&enc), Ok(d));
    assert!(pdata.len() >= RECORD_LEN);
    if d.check_sizes(max_admin, max_io, max_qid).is_ok() {
        let limit = if d.qid == 0 { max_admin } else { max_io };
        let depth = u32::from(d.hsqsize) + 1;
        assert!(d.qid <= max_qid && d.hsqsize > 0 && depth <= limit);
        assert!(u32::from(d.hrqsize) >= depth);
    }
});
