//! rtgt NVMe-oF RDMA transport.
