//! A job with two operators that share a uid. Weir refuses it before running anything: state
//! is matched to operators by uid, so uids must be unique. Prints one line and exits with 2.

use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator};

fn main() -> std::process::ExitCode {
    let env = StreamEnv::new("duplicate-uid");
    let events = env.source("events", EventGenerator::new(1, 10).with_limit(10));
    events
        .key_by(|e: &Event| e.user)
        .sum("totals", |e: &Event| e.amount)
        .key_by(|(user, _): &(u64, u64)| *user)
        .count("count")
        .uid("totals")
        .sink("out", CollectSink::default());
    match env.build() {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(e.exit_code())
        }
    }
}
