//! weir-storage
