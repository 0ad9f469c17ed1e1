//! rtgt SRP (SCSI RDMA Protocol) target transport.
