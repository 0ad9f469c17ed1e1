//! NVMe controller logic (sans-I/O): fabrics, admin and I/O command handling and discovery.
