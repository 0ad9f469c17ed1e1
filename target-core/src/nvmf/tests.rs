//! Tests of the exec layer.
