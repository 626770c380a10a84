//! Flink's three delivery guarantees, as a sink is configured with them (`none`,
//! `at-least-once`, `exactly-once`).

use std::fmt;
use std::str::FromStr;

/// What the sink promises about each record after failures, in Flink's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Records may be lost or repeated.
    None,
    /// Every record is written at least once: a checkpoint covers every record before its barrier.
    AtLeastOnce,
    /// Every record is written once: records commit with the checkpoint that covers them.
    ExactlyOnce,
}

impl FromStr for DeliveryGuarantee {
    type Err = String;

    /// `none`, `at-least-once` or `exactly-once`.
    fn from_str(s: &str) -> Result<DeliveryGuarantee, String> {
        match s {
            "none" => Ok(DeliveryGuarantee::None),
            "at-least-once" => Ok(DeliveryGuarantee::AtLeastOnce),
            "exactly-once" => Ok(DeliveryGuarantee::ExactlyOnce),
            _ => Err(format!(
                "delivery guarantee `{s}`: expected none, at-least-once or exactly-once"
            )),
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
