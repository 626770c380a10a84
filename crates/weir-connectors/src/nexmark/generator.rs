//! The Nexmark event generator: event number `n` → the `n`-th event of the stream, as a pure
//! function of the configuration's seed and `n`.
//!
//! It follows the Nexmark specification as implemented by nexmark-flink's generator: out of
//! every 50 events, 1 is a person, 3 are auctions and 46 are bids; ids are dense and derived
//! from the event number (people and auctions start at 1000); bids go mostly to "hot" auctions
//! and come mostly from "hot" bidders, the rest spread over the last `num_in_flight_auctions`
//! auctions and `num_active_people` people (plus a few ids not created yet); prices are
//! log-uniform between $1 and $1,000,000; auctions close after a random time averaging the time
//! to create `num_in_flight_auctions` more; and each event carries an `extra` string padding it
//! to the average size of its kind (people 200, auctions 500, bids 100 bytes).
//!
//! Event `n` happens at `base_time + n / events_per_second`: event time advances at the
//! configured rate whatever the speed of generation. Unlike nexmark-flink, whose random numbers
//! come from an unseeded generator, every event here draws from a generator seeded with
//! `(seed, n)`, so the stream is the same in every run and after every restore.
//!
//! ```
//! use weir_connectors::nexmark::{Event, NexmarkConfig, NexmarkGenerator};
//!
//! let generator = NexmarkGenerator::new(NexmarkConfig::default());
//! assert!(matches!(generator.event(0), Event::Person(p) if p.id == 1000));
//! assert!(matches!(generator.event(1), Event::Auction(a) if a.id == 1000));
//! assert!(matches!(generator.event(4), Event::Bid(_)));
//! assert_eq!(generator.event(7), generator.event(7));
//! ```

use super::model::{Auction, Bid, Channel, Event, Person};
use std::sync::OnceLock;

/// The Nexmark workload's parameters; the defaults are nexmark-flink's.
#[derive(Clone, Debug, PartialEq)]
pub struct NexmarkConfig {
    /// Seeds every random choice.
    pub seed: u64,
    /// Event time of event 0, ms since the Unix epoch.
    pub base_time: i64,
    /// How fast event time advances: events per second of event time.
    pub events_per_second: u64,
    pub person_proportion: u64,
    pub auction_proportion: u64,
    pub bid_proportion: u64,
    pub num_active_people: u64,
    pub num_in_flight_auctions: u64,
    /// One bid in `hot_auction_ratio` goes to a random auction, the others to a hot one.
    pub hot_auction_ratio: u64,
    pub hot_sellers_ratio: u64,
    pub hot_bidders_ratio: u64,
    pub avg_person_byte_size: usize,
    pub avg_auction_byte_size: usize,
    pub avg_bid_byte_size: usize,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            seed: 42,
            // 2026-01-01T00:00:00Z.
            base_time: 1_767_225_600_000,
            events_per_second: 10_000_000,
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            num_active_people: 1000,
            num_in_flight_auctions: 100,
            hot_auction_ratio: 2,
            hot_sellers_ratio: 4,
            hot_bidders_ratio: 4,
            avg_person_byte_size: 200,
            avg_auction_byte_size: 500,
            avg_bid_byte_size: 100,
        }
    }
}

/// Ids are grouped in batches of this many; the hot seller, bidder and auction is the first
/// (or second) of the latest batch.
const HOT_RATIO: u64 = 100;
/// Ids a bid or auction may reference before they are created.
const ID_LEAD: u64 = 10;
const FIRST_PERSON_ID: u64 = 1000;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_CATEGORY_ID: u64 = 10;
const NUM_CATEGORIES: u64 = 5;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// A small, fast generator (wyrand), seeded per event.
struct Rng(u64);

impl Rng {
    fn for_event(seed: u64, n: u64) -> Rng {
        Rng(splitmix64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in `0..bound` (`bound` > 0).
    #[inline]
    fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Where event `n` falls in the cycle of event kinds: `n = epoch * total + offset`, computed
/// once per event.
#[derive(Clone, Copy)]
struct At {
    n: u64,
    epoch: u64,
    offset: u64,
}

/// Generates the events of a [`NexmarkConfig`]; see the module documentation.
#[derive(Clone, Debug)]
pub struct NexmarkGenerator {
    config: NexmarkConfig,
    total: u64,
}

impl NexmarkGenerator {
    pub fn new(config: NexmarkConfig) -> NexmarkGenerator {
        let total =
            (config.person_proportion + config.auction_proportion + config.bid_proportion).max(1);
        NexmarkGenerator { config, total }
    }

    pub fn config(&self) -> &NexmarkConfig {
        &self.config
    }

    /// The event time of event `n`.
    #[inline]
    pub fn timestamp(&self, n: u64) -> i64 {
        let rate = self.config.events_per_second.max(1);
        let ms = match n.checked_mul(1000) {
            Some(scaled) => scaled / rate,
            None => (n as u128 * 1000 / rate as u128) as u64,
        };
        self.config.base_time + ms as i64
    }

    /// Event `n` of the stream.
    pub fn event(&self, n: u64) -> Event {
        let mut rng = Rng::for_event(self.config.seed, n);
        let ts = self.timestamp(n);
        let at = At {
            n,
            epoch: n / self.total,
            offset: n % self.total,
        };
        if at.offset < self.config.person_proportion {
            Event::Person(Box::new(self.person(at, ts, &mut rng)))
        } else if at.offset < self.config.person_proportion + self.config.auction_proportion {
            Event::Auction(Box::new(self.auction(at, ts, &mut rng)))
        } else {
            Event::Bid(self.bid(at, ts, &mut rng))
        }
    }

    /// The newest person id (base 0) as of event `at`.
    #[inline]
    fn last_person(&self, at: At) -> u64 {
        let offset = at
            .offset
            .min(self.config.person_proportion.saturating_sub(1));
        at.epoch * self.config.person_proportion + offset
    }

    /// The newest auction id (base 0) as of event `at`.
    #[inline]
    fn last_auction(&self, at: At) -> u64 {
        let c = &self.config;
        let mut epoch = at.epoch;
        let mut offset = at.offset;
        if offset < c.person_proportion {
            // About to generate a person: the last auction of the previous epoch.
            if epoch == 0 {
                return 0;
            }
            epoch -= 1;
            offset = c.auction_proportion - 1;
        } else if offset >= c.person_proportion + c.auction_proportion {
            offset = c.auction_proportion - 1;
        } else {
            offset -= c.person_proportion;
        }
        epoch * c.auction_proportion + offset
    }

    /// A random recently active person (base 0), possibly one not created yet.
    fn random_person(&self, at: At, rng: &mut Rng) -> u64 {
        let people = self.last_person(at) + 1;
        let active = people.min(self.config.num_active_people);
        people - active + rng.below(active + ID_LEAD)
    }

    /// A random auction likely still open (base 0), possibly one not created yet.
    fn random_auction(&self, at: At, rng: &mut Rng) -> u64 {
        let max = self.last_auction(at);
        let min = max.saturating_sub(self.config.num_in_flight_auctions);
        min + rng.below(max - min + 1 + ID_LEAD)
    }

    fn person(&self, at: At, ts: i64, rng: &mut Rng) -> Person {
        let id = self.last_person(at) + FIRST_PERSON_ID;
        let name = format!(
            "{} {}",
            FIRST_NAMES[rng.below(FIRST_NAMES.len() as u64) as usize],
            LAST_NAMES[rng.below(LAST_NAMES.len() as u64) as usize]
        );
        let email_address = format!("{}@{}.com", next_string(rng, 7), next_string(rng, 5));
        let credit_card = format!(
            "{:04} {:04} {:04} {:04}",
            rng.below(10_000),
            rng.below(10_000),
            rng.below(10_000),
            rng.below(10_000)
        );
        let city = US_CITIES[rng.below(US_CITIES.len() as u64) as usize].to_string();
        let state = US_STATES[rng.below(US_STATES.len() as u64) as usize].to_string();
        let size =
            8 + name.len() + email_address.len() + credit_card.len() + city.len() + state.len();
        let extra = next_extra(rng, size, self.config.avg_person_byte_size);
        Person {
            id,
            name,
            email_address,
            credit_card,
            city,
            state,
            date_time: ts,
            extra,
        }
    }

    fn auction(&self, at: At, ts: i64, rng: &mut Rng) -> Auction {
        let c = &self.config;
        let id = self.last_auction(at) + FIRST_AUCTION_ID;
        let seller = if rng.below(c.hot_sellers_ratio.max(1)) > 0 {
            (self.last_person(at) / HOT_RATIO) * HOT_RATIO
        } else {
            self.random_person(at, rng)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES);
        let initial_bid = next_price(rng);
        // The time to create `num_in_flight_auctions` more auctions, on average.
        let events_ahead = c.num_in_flight_auctions * self.total / c.auction_proportion.max(1);
        let horizon = (self.timestamp(at.n + events_ahead) - ts).max(0) as u64;
        let expires = ts + 1 + rng.below((horizon * 2).max(1)) as i64;
        let item_name = next_string(rng, 20);
        let description = next_string(rng, 100);
        let reserve = initial_bid + next_price(rng);
        let size = 8 + item_name.len() + description.len() + 8 + 8 + 8 + 8 + 8;
        let extra = next_extra(rng, size, c.avg_auction_byte_size);
        Auction {
            id,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time: ts,
            expires,
            seller,
            category,
            extra,
        }
    }

    fn bid(&self, at: At, ts: i64, rng: &mut Rng) -> Bid {
        let c = &self.config;
        let auction = if rng.below(c.hot_auction_ratio.max(1)) > 0 {
            (self.last_auction(at) / HOT_RATIO) * HOT_RATIO
        } else {
            self.random_auction(at, rng)
        } + FIRST_AUCTION_ID;
        let bidder = if rng.below(c.hot_bidders_ratio.max(1)) > 0 {
            // The second person of the batch, so hot bidders and hot sellers differ.
            (self.last_person(at) / HOT_RATIO) * HOT_RATIO + 1
        } else {
            self.random_person(at, rng)
        } + FIRST_PERSON_ID;
        let price = next_price(rng);
        let channel = if rng.below(2) > 0 {
            Channel(rng.below(4) as u32)
        } else {
            Channel(4 + rng.below(10_000) as u32)
        };
        let extra = next_extra(rng, 32, c.avg_bid_byte_size);
        Bid {
            auction,
            bidder,
            price,
            channel,
            date_time: ts,
            extra,
        }
    }
}

/// A price in cents, log-uniform between $1 and $1,000,000.
fn next_price(rng: &mut Rng) -> u64 {
    ((rng.unit() * 6.0 * std::f64::consts::LN_10).exp() * 100.0).round() as u64
}

/// A random string of 3 to `max_len - 1` lower-case letters and spaces, trimmed.
fn next_string(rng: &mut Rng, max_len: u64) -> String {
    let len = 3 + rng.below(max_len - 3);
    let mut s = String::with_capacity(len as usize);
    for _ in 0..len {
        if rng.below(13) == 0 {
            s.push(' ');
        } else {
            s.push((b'a' + rng.below(26) as u8) as char);
        }
    }
    s.trim().to_string()
}

/// The letters random strings are cut from: 1 MiB of random lower-case letters, made once.
const LETTERS: usize = 1 << 20;

fn letters() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut rng = Rng(0x6e65_786d_6172_6b21);
        (0..LETTERS)
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect()
    })
}

/// Exactly `len` random lower-case letters: a slice of the pool at a random offset.
fn next_exact_string(rng: &mut Rng, len: usize) -> String {
    let len = len.min(LETTERS);
    let start = rng.below((LETTERS - len + 1) as u64) as usize;
    letters()[start..start + len].to_string()
}

/// A string that brings an event of `current` bytes to `average` bytes on average.
fn next_extra(rng: &mut Rng, current: usize, average: usize) -> String {
    if current > average {
        return String::new();
    }
    let wanted = average - current;
    let delta = (wanted as f64 * 0.2).round() as usize;
    let min = wanted - delta;
    let len = min
        + if delta == 0 {
            0
        } else {
            rng.below(2 * delta as u64) as usize
        };
    next_exact_string(rng, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator() -> NexmarkGenerator {
        NexmarkGenerator::new(NexmarkConfig::default())
    }

    #[test]
    fn one_event_in_fifty_is_a_person_and_three_are_auctions() {
        let g = generator();
        let (mut people, mut auctions, mut bids) = (0, 0, 0);
        for n in 0..5_000 {
            match g.event(n) {
                Event::Person(_) => people += 1,
                Event::Auction(_) => auctions += 1,
                Event::Bid(_) => bids += 1,
            }
        }
        assert_eq!((people, auctions, bids), (100, 300, 4_600));
    }

    #[test]
    fn ids_are_dense_and_bids_reference_existing_or_soon_created_ids() {
        let g = generator();
        let (mut next_person, mut next_auction) = (FIRST_PERSON_ID, FIRST_AUCTION_ID);
        for n in 0..20_000 {
            match g.event(n) {
                Event::Person(p) => {
                    assert_eq!(p.id, next_person);
                    next_person += 1;
                }
                Event::Auction(a) => {
                    assert_eq!(a.id, next_auction);
                    assert!(a.expires > a.date_time);
                    assert!((10..15).contains(&a.category));
                    next_auction += 1;
                }
                Event::Bid(b) => {
                    assert!(b.auction < next_auction + ID_LEAD);
                    assert!(b.bidder < next_person + ID_LEAD);
                    assert!((100..=100_000_000).contains(&b.price));
                }
            }
        }
    }

    #[test]
    fn event_time_advances_at_the_configured_rate() {
        let g = NexmarkGenerator::new(NexmarkConfig {
            events_per_second: 1_000,
            ..NexmarkConfig::default()
        });
        assert_eq!(g.event(0).date_time(), g.config().base_time);
        assert_eq!(g.event(1_000).date_time(), g.config().base_time + 1_000);
        assert_eq!(g.event(1_500).date_time(), g.config().base_time + 1_500);
    }

    #[test]
    fn events_pad_to_the_average_size_of_their_kind() {
        let g = generator();
        let (mut total, mut count) = (0usize, 0usize);
        for n in 0..10_000 {
            if let Event::Bid(b) = g.event(n) {
                total += 32 + b.extra.len();
                count += 1;
            }
        }
        let average = total / count;
        assert!((95..=105).contains(&average), "{average}");
    }

    #[test]
    fn different_seeds_give_different_streams() {
        let a = generator();
        let b = NexmarkGenerator::new(NexmarkConfig {
            seed: 7,
            ..NexmarkConfig::default()
        });
        assert!((0..100).any(|n| a.event(n) != b.event(n)));
    }
}
