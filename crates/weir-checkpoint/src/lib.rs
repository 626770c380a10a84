//! weir-checkpoint
