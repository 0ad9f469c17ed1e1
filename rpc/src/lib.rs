//! rtgt JSON-RPC control plane (SPDK rpc.py compatible).
