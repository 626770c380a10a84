//! Prints the records of a topic that a `read_committed` consumer must see, one per line as
//! `partition offset key<TAB>payload`, worked out from the raw batches and transaction markers,
//! and a summary of what was left out on standard error.
//!
//! `cargo run -p weir-kafka --example committed -- 127.0.0.1:9092 counts`

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [broker, topic] = args.as_slice() else {
        eprintln!("usage: committed BROKER TOPIC");
        std::process::exit(2);
    };
    match weir_kafka::committed::read_committed(broker, topic) {
        Ok(read) => {
            for r in &read.records {
                let text = |b: &Option<bytes::Bytes>| {
                    String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned()
                };
                println!(
                    "{} {} {}\t{}",
                    r.partition,
                    r.offset,
                    text(&r.key),
                    text(&r.payload)
                );
            }
            eprintln!(
                "{} committed records; left out: {} of aborted transactions, {} of open ones \
                 ({} commits, {} aborts)",
                read.records.len(),
                read.aborted,
                read.open,
                read.commits,
                read.aborts
            );
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
