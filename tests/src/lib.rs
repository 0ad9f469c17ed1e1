//! Shared helpers for rtgt's cross-crate tests: test initiators and harness utilities.
