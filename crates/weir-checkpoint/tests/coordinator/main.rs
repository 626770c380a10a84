//! The coordinator's rules, one test per rule, driven with a manual time value, plus a
//! property test over random interleavings of events.

mod acknowledgement;
mod failure_budget;
mod harness;
mod invariants;
mod savepoints_and_shutdown;
mod scheduling;
mod store_and_stats;
