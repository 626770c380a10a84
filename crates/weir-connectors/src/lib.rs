//! weir-connectors
