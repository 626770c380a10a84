//! q8, monitor new users: the people who opened an auction in the same 10 s window they
//! registered in — a windowed join (co-group) of people and auctions on person id = seller.

use weir_api::prelude::*;

use super::WINDOW_MS;
use crate::nexmark::model::{Auction, Event, Person};
use std::time::Duration;

/// A result of q8.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NewSeller {
    pub id: u64,
    pub name: String,
    pub window_start: i64,
}

/// ```sql
/// SELECT P.id, P.name, P.starttime FROM
///   (SELECT id, name, window_start AS starttime FROM TUMBLE(person, dateTime, 10 s)) P
/// JOIN
///   (SELECT seller, window_start AS starttime FROM TUMBLE(auction, dateTime, 10 s)) A
/// ON P.id = A.seller AND P.starttime = A.starttime
/// ```
pub fn q8(events: DataStream<Event>) -> DataStream<NewSeller> {
    let (people, auctions) = super::people_and_auctions(events, "q8-select").split();
    people
        .key_by(|p: &Person| p.id)
        .window_join(
            auctions.key_by(|a: &Auction| a.seller),
            TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS as u64)),
            |p: &Person| p.date_time,
            |a: &Auction| a.date_time,
        )
        .co_group(
            "q8-join",
            |_: &u64,
             window: TimeWindow,
             people: WindowElements<'_, Person>,
             mut auctions: WindowElements<'_, Auction>,
             out: &mut Vec<NewSeller>| {
                if auctions.next().is_some() {
                    for p in people {
                        out.push(NewSeller {
                            id: p.id,
                            name: p.name.clone(),
                            window_start: window.start,
                        });
                    }
                }
            },
        )
}
