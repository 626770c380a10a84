//! Flink's three delivery guarantees, as a sink is configured with them (`none`,
//! `at-least-once`, `exactly-once`).

use std::fmt;
use std::str::FromStr;

use crate::error::PgError;

/// What the sink promises about each row after failures, in Flink's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Rows may be lost or repeated.
    None,
    /// Every row is written at least once: a checkpoint covers every row before its barrier.
    AtLeastOnce,
    /// Every row is written once: rows commit with the checkpoint that covers them.
    ExactlyOnce,
}

impl FromStr for DeliveryGuarantee {
    type Err = PgError;

    /// `none`, `at-least-once` or `exactly-once`.
    fn from_str(s: &str) -> Result<DeliveryGuarantee, PgError> {
        match s {
            "none" => Ok(DeliveryGuarantee::None),
            "at-least-once" => Ok(DeliveryGuarantee::AtLeastOnce),
            "exactly-once" => Ok(DeliveryGuarantee::ExactlyOnce),
            _ => Err(PgError::Config(format!(
                "delivery guarantee `{s}`: expected none, at-least-once or exactly-once"
            ))),
        }
    }
}

impl fmt::Display for DeliveryGuarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeliveryGuarantee::None => "none",
            DeliveryGuarantee::AtLeastOnce => "at-least-once",
            DeliveryGuarantee::ExactlyOnce => "exactly-once",
        })
    }
}
