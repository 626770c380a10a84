//! Every Nexmark query, run as a streaming job at parallelism 2 with checkpoints, gives exactly
//! what a straightforward batch computation over the same events gives — and still does when
//! its stateful operators fail and the job recovers from its checkpoints.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;
use weir_api::prelude::*;
use weir_api::ExactlyOnceCollectSink;
use weir_connectors::nexmark::queries::{
    self, CategoryAverage, HighestBid, HotItem, LocalItem, NewSeller,
};
use weir_connectors::nexmark::{
    Auction, Bid, Event, NexmarkConfig, NexmarkGenerator, NexmarkSource, Person,
};
use weir_runtime::restart::RestartStrategy;
use weir_runtime::FailureInjection;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

const EVENTS: u64 = 300_000;

/// 10,000 events per second of event time: 30 s of auctions, enough for many windows.
fn config() -> NexmarkConfig {
    NexmarkConfig {
        events_per_second: 10_000,
        ..NexmarkConfig::default()
    }
}

fn all_events() -> Vec<Event> {
    let g = NexmarkGenerator::new(config());
    (0..EVENTS).map(|n| g.event(n)).collect()
}

/// Runs `query` over the events and returns what its exactly-once sink committed.
fn run<O, Q>(name: &str, query: Q) -> Vec<O>
where
    O: weir_core::Data,
    Q: FnOnce(DataStream<Event>) -> DataStream<O>,
{
    run_failing(name, query, None).0
}

/// Like [`run`], with failures injected into the operators `uids` at random batches; also
/// returns how many times the job restarted.
fn run_failing<O, Q>(name: &str, query: Q, failures: Option<(&[&str], f64)>) -> (Vec<O>, u32)
where
    O: weir_core::Data,
    Q: FnOnce(DataStream<Event>) -> DataStream<O>,
{
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new(name);
    env.set_parallelism(2);
    let events = env.source_with_watermarks(
        "nexmark",
        NexmarkSource::new(config()).with_limit(EVENTS),
        weir_connectors::nexmark::watermarks(&config()),
    );
    let sink = ExactlyOnceCollectSink::default();
    query(events).sink("out", sink.clone());
    let mut exec = ExecutionConfig {
        start: StartMode::Fresh,
        ..ExecutionConfig::default()
    };
    exec.checkpoint.dir = dir.path().to_path_buf();
    exec.checkpoint.interval = Some(Duration::from_millis(50));
    exec.restart = RestartStrategy::FixedDelay {
        attempts: 1_000,
        delay: Duration::from_millis(1),
    };
    if let Some((uids, probability)) = failures {
        exec.failure_injection = Some(FailureInjection {
            uids: uids.iter().map(|u| u.to_string()).collect(),
            probability,
            every: None,
        });
    }
    let summary = execute(
        &env.build().unwrap(),
        &exec,
        &StopHandle::new(),
        &mut |_| {},
    )
    .unwrap();
    (sink.records(), summary.restarts)
}

fn bids(events: &[Event]) -> impl Iterator<Item = &Bid> {
    events.iter().filter_map(|e| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}

fn people(events: &[Event]) -> impl Iterator<Item = &Person> {
    events.iter().filter_map(|e| match e {
        Event::Person(p) => Some(&**p),
        _ => None,
    })
}

fn auctions(events: &[Event]) -> impl Iterator<Item = &Auction> {
    events.iter().filter_map(|e| match e {
        Event::Auction(a) => Some(&**a),
        _ => None,
    })
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// A bid's fields, comparable.
type BidKey = (i64, u64, u64, u64, String);

fn bid_key(b: &Bid) -> BidKey {
    (b.date_time, b.auction, b.bidder, b.price, b.extra.clone())
}

fn window_start(t: i64, size: i64) -> i64 {
    t - t.rem_euclid(size)
}

#[test]
fn q0_passes_every_bid_through() {
    let events = all_events();
    let got = sorted(run("q0", queries::q0).iter().map(bid_key).collect());
    let expected = sorted(bids(&events).map(bid_key).collect());
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}

#[test]
fn q1_converts_every_price_to_euros() {
    let events = all_events();
    let got = sorted(run("q1", queries::q1).iter().map(bid_key).collect());
    let expected = sorted(
        bids(&events)
            .map(|b| {
                let mut b = b.clone();
                b.price = (b.price as f64 * 0.908).round() as u64;
                bid_key(&b)
            })
            .collect(),
    );
    assert_eq!(got, expected);
}

#[test]
fn q2_selects_the_bids_on_every_123rd_auction() {
    let events = all_events();
    let got = sorted(run("q2", queries::q2));
    let expected = sorted(
        bids(&events)
            .filter(|b| b.auction % 123 == 0)
            .map(|b| (b.auction, b.price))
            .collect(),
    );
    assert!(!expected.is_empty());
    assert_eq!(got, expected);
}

fn q3_expected(events: &[Event]) -> Vec<LocalItem> {
    let sellers: HashMap<u64, &Person> = people(events)
        .filter(|p| ["OR", "ID", "CA"].contains(&p.state.as_str()))
        .map(|p| (p.id, p))
        .collect();
    sorted(
        auctions(events)
            .filter(|a| a.category == 10)
            .filter_map(|a| {
                sellers.get(&a.seller).map(|p| LocalItem {
                    name: p.name.clone(),
                    city: p.city.clone(),
                    state: p.state.clone(),
                    auction: a.id,
                })
            })
            .collect(),
    )
}

#[test]
fn q3_joins_local_sellers_with_their_auctions_in_category_10() {
    let events = all_events();
    let expected = q3_expected(&events);
    assert!(expected.len() > 100, "{}", expected.len());
    assert_eq!(sorted(run("q3", queries::q3)), expected);
}

/// The final average per category: `(total, count)` of the auctions' closing prices.
fn q4_expected(events: &[Event]) -> BTreeMap<u64, (u64, u64)> {
    let mut best: HashMap<u64, u64> = HashMap::new();
    let by_id: HashMap<u64, &Auction> = auctions(events).map(|a| (a.id, a)).collect();
    for b in bids(events) {
        if let Some(a) = by_id.get(&b.auction) {
            if a.date_time <= b.date_time && b.date_time <= a.expires {
                let e = best.entry(a.id).or_insert(0);
                *e = (*e).max(b.price);
            }
        }
    }
    let mut per_category = BTreeMap::new();
    for (id, price) in best {
        let e = per_category.entry(by_id[&id].category).or_insert((0, 0));
        e.0 += price;
        e.1 += 1;
    }
    per_category
}

fn q4_final(results: Vec<CategoryAverage>) -> BTreeMap<u64, (u64, u64)> {
    let mut last = BTreeMap::new();
    for r in results {
        let e = last.entry(r.category).or_insert((0, 0));
        if r.count > e.1 {
            *e = (r.total, r.count);
        }
    }
    last
}

#[test]
fn q4_averages_the_closing_prices_of_each_category() {
    let events = all_events();
    let expected = q4_expected(&events);
    assert_eq!(expected.len(), 5);
    assert_eq!(q4_final(run("q4", queries::q4)), expected);
}

fn q5_expected(events: &[Event]) -> Vec<HotItem> {
    let mut counts: BTreeMap<(i64, u64), u64> = BTreeMap::new();
    for b in bids(events) {
        let mut start = window_start(b.date_time, 2_000);
        while start + 10_000 > b.date_time {
            *counts.entry((start, b.auction)).or_insert(0) += 1;
            start -= 2_000;
        }
    }
    let mut max: BTreeMap<i64, u64> = BTreeMap::new();
    for (&(start, _), &n) in &counts {
        let m = max.entry(start).or_insert(0);
        *m = (*m).max(n);
    }
    sorted(
        counts
            .iter()
            .filter(|((start, _), n)| max[start] == **n)
            .map(|(&(start, auction), &bids)| HotItem {
                window: TimeWindow::new(start, start + 10_000),
                auction,
                bids,
            })
            .collect(),
    )
}

#[test]
fn q5_finds_the_auctions_with_the_most_bids_in_each_sliding_window() {
    let events = all_events();
    let expected = q5_expected(&events);
    let windows: BTreeSet<i64> = expected.iter().map(|h| h.window.start).collect();
    assert!(windows.len() > 10, "{}", windows.len());
    assert_eq!(sorted(run("q5", queries::q5)), expected);
}

fn q7_key(h: &HighestBid) -> (i64, BidKey) {
    (h.window.start, bid_key(&h.bid))
}

fn q7_expected(events: &[Event]) -> Vec<(i64, BidKey)> {
    let mut max: BTreeMap<i64, u64> = BTreeMap::new();
    for b in bids(events) {
        let m = max.entry(window_start(b.date_time, 10_000)).or_insert(0);
        *m = (*m).max(b.price);
    }
    sorted(
        bids(events)
            .filter(|b| max[&window_start(b.date_time, 10_000)] == b.price)
            .map(|b| (window_start(b.date_time, 10_000), bid_key(b)))
            .collect(),
    )
}

#[test]
fn q7_finds_the_highest_bids_of_each_tumbling_window() {
    let events = all_events();
    let expected = q7_expected(&events);
    assert!(expected.len() >= 3);
    let got = sorted(run("q7", queries::q7).iter().map(q7_key).collect());
    assert_eq!(got, expected);
}

fn q8_expected(events: &[Event]) -> Vec<NewSeller> {
    let opened: BTreeSet<(u64, i64)> = auctions(events)
        .map(|a| (a.seller, window_start(a.date_time, 10_000)))
        .collect();
    sorted(
        people(events)
            .filter(|p| opened.contains(&(p.id, window_start(p.date_time, 10_000))))
            .map(|p| NewSeller {
                id: p.id,
                name: p.name.clone(),
                window_start: window_start(p.date_time, 10_000),
            })
            .collect(),
    )
}

#[test]
fn q8_finds_the_people_who_opened_an_auction_in_the_window_they_registered_in() {
    let events = all_events();
    let expected = q8_expected(&events);
    assert!(expected.len() > 100, "{}", expected.len());
    assert_eq!(sorted(run("q8", queries::q8)), expected);
}

#[test]
fn windows_and_timers_fire_exactly_once_through_failures_and_recovery() {
    let events = all_events();
    let (q5, q5_restarts) = run_failing(
        "q5-failing",
        queries::q5,
        Some((&["nexmark", "q5-bids-per-auction", "q5-hottest"], 0.01)),
    );
    assert_eq!(sorted(q5), q5_expected(&events));
    let (q4, q4_restarts) = run_failing(
        "q4-failing",
        queries::q4,
        Some((&["q4-closing-prices", "q4-averages"], 0.01)),
    );
    assert_eq!(q4_final(q4), q4_expected(&events));
    let (q8, q8_restarts) = run_failing(
        "q8-failing",
        queries::q8,
        Some((&["q8-auctions-per-seller", "q8-join"], 0.1)),
    );
    assert_eq!(sorted(q8), q8_expected(&events));
    // Failures strike at random batches, so a run may draw none (q8's operators see only a
    // few dozen batches); all three together practically never do.
    assert!(
        q5_restarts + q4_restarts + q8_restarts > 0,
        "no failure was injected"
    );
}
