//! The three Nexmark event types — people registering, auctions opening, bids — and the
//! stream of them.
//!
//! Field names and meanings follow the Nexmark benchmark (as in Apache Beam and
//! nexmark-flink); times are milliseconds since the Unix epoch. A bid's channel and URL come
//! from a fixed table of channels, so a bid holds the channel's number rather than two strings
//! ([`Channel::name`], [`Channel::url`]).

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Someone registered to buy and sell.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Person {
    pub id: u64,
    pub name: String,
    pub email_address: String,
    pub credit_card: String,
    pub city: String,
    pub state: String,
    pub date_time: i64,
    pub extra: String,
}

/// An item put up for auction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Auction {
    pub id: u64,
    pub item_name: String,
    pub description: String,
    pub initial_bid: u64,
    pub reserve: u64,
    pub date_time: i64,
    /// When the auction closes.
    pub expires: i64,
    pub seller: u64,
    pub category: u64,
    pub extra: String,
}

/// A bid on an auction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bid {
    pub auction: u64,
    pub bidder: u64,
    /// In cents.
    pub price: u64,
    pub channel: Channel,
    pub date_time: i64,
    pub extra: String,
}

/// One event of the Nexmark stream. People and auctions (8 % of events) are boxed, so the
/// stream moves bid-sized values.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    Person(Box<Person>),
    Auction(Box<Auction>),
    Bid(Bid),
}

impl Event {
    /// The event's time.
    #[inline]
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }
}

/// The channels bids come through: the four "hot" ones, then `channel-0` … `channel-9999`.
pub const CHANNELS: u32 = 4 + 10_000;

/// Where a bid came from: a channel name and the URL it was placed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Channel(pub u32);

const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

struct ChannelTable {
    names: Vec<String>,
    urls: Vec<String>,
}

fn table() -> &'static ChannelTable {
    static TABLE: OnceLock<ChannelTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut names: Vec<String> = HOT_CHANNELS.iter().map(|s| s.to_string()).collect();
        let mut urls: Vec<String> = HOT_CHANNELS
            .iter()
            .map(|s| {
                format!(
                    "https://www.nexmark.com/{}/item.htm?query=1",
                    s.to_lowercase()
                )
            })
            .collect();
        let mut x = 0x5eed_c4a7_u64;
        for i in 0..10_000u32 {
            names.push(format!("channel-{i}"));
            let mut segment = || -> String {
                (0..5)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (b'a' + ((x >> 33) % 26) as u8) as char
                    })
                    .collect()
            };
            let (a, b, c) = (segment(), segment(), segment());
            let mut url = format!("https://www.nexmark.com/{a}/{b}/{c}/item.htm?query=1");
            if i % 10 == 0 {
                url.push_str(&format!("&channel_id={i}"));
            }
            urls.push(url);
        }
        ChannelTable { names, urls }
    })
}

impl Channel {
    /// The channel's name, e.g. `Google` or `channel-42`.
    pub fn name(&self) -> &'static str {
        table()
            .names
            .get(self.0 as usize)
            .map_or("unknown", String::as_str)
    }

    /// The URL of the bid's page on this channel.
    pub fn url(&self) -> &'static str {
        table().urls.get(self.0 as usize).map_or("", String::as_str)
    }
}
