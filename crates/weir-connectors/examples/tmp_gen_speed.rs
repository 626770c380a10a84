use std::time::Instant;
use weir_connectors::nexmark::*;
fn main() {
    let g = NexmarkGenerator::new(NexmarkConfig::default());
    let n = 5_000_000u64;
    let t = Instant::now();
    let mut sum = 0usize;
    for i in 0..n {
        let e = g.event(i);
        if let Event::Bid(b) = &e {
            sum += b.extra.len();
        }
    }
    let el = t.elapsed();
    println!(
        "{} events in {:?}: {:.1} ns/event ({})",
        n,
        el,
        el.as_nanos() as f64 / n as f64,
        sum
    );
}
