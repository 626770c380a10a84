//! weir-api
