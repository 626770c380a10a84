//! q8, monitor new users: the people who opened an auction in the same 10 s window they
//! registered in — a windowed join (co-group) of people and auctions on person id = seller.
//!
//! As in nexmark-flink's q8, each side is grouped by its key and window before the join: the
//! auctions become one count per seller and window (people are one row per id already), so the
//! join buffers a row per seller and window instead of every auction a seller opens.

use compact_str::CompactString;
use weir_api::prelude::*;

use super::WINDOW_MS;
use crate::nexmark::model::Event;
use std::time::Duration;
use weir_runtime::operators::window::Count;

/// A result of q8.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct NewSeller {
    pub id: u64,
    pub name: String,
    pub window_start: i64,
}

/// What q8 needs of a person: its id, name and registration time. The name is kept inline
/// (up to 24 bytes, as every generated name is) instead of in an allocation of its own: the
/// join buffers a person per window, and a checkpoint encodes them without chasing a pointer
/// per person. It is encoded as a string, like `String`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Registered {
    id: u64,
    name: CompactString,
    date_time: i64,
}

/// What q8 needs of an auction: its seller and time.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Opened {
    seller: u64,
    date_time: i64,
}

/// ```sql
/// SELECT P.id, P.name, P.starttime FROM
///   (SELECT id, name, window_start AS starttime FROM TUMBLE(person, dateTime, 10 s)
///    GROUP BY id, name, window_start) P
/// JOIN
///   (SELECT seller, window_start AS starttime FROM TUMBLE(auction, dateTime, 10 s)
///    GROUP BY seller, window_start) A
/// ON P.id = A.seller AND P.starttime = A.starttime
/// ```
pub fn q8(events: DataStream<Event>) -> DataStream<NewSeller> {
    // Only the columns the query reads are kept in state.
    let (people, auctions) = events
        .flat_map("q8-select", |e: Event| match e {
            Event::Person(p) => Some(Either::Left(Registered {
                id: p.id,
                name: CompactString::from(p.name),
                date_time: p.date_time,
            })),
            Event::Auction(a) => Some(Either::Right(Opened {
                seller: a.seller,
                date_time: a.date_time,
            })),
            Event::Bid(_) => None,
        })
        .split();
    let window = || TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS as u64));
    // One row per seller and window, at the window's start.
    let sellers = auctions
        .key_by(|a: &Opened| a.seller)
        .window(window(), |a: &Opened| a.date_time)
        .aggregate("q8-auctions-per-seller", Count);
    people
        .key_by(|p: &Registered| p.id)
        .window_join(
            sellers.key_by(|s: &WindowResult<u64, u64>| s.key),
            window(),
            |p: &Registered| p.date_time,
            |s: &WindowResult<u64, u64>| s.window.start,
        )
        .co_group(
            "q8-join",
            |_: &u64,
             window: TimeWindow,
             people: WindowElements<'_, Registered>,
             mut sellers: WindowElements<'_, WindowResult<u64, u64>>,
             out: &mut Vec<NewSeller>| {
                if sellers.next().is_some() {
                    for p in people {
                        out.push(NewSeller {
                            id: p.id,
                            name: p.name.to_string(),
                            window_start: window.start,
                        });
                    }
                }
            },
        )
}
