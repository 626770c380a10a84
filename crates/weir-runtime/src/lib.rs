//! weir-runtime
