//! rtgt fabric: verbs and RDMA CM behind one safe API, with an `rdma` provider over rdma-sys and
//! an in-process `sim` provider for tests.

pub mod mem;
