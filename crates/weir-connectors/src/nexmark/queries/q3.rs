//! q3, local item suggestion: who sells in category 10 and lives in Oregon, Idaho or
//! California — a join of people and auctions on the seller, kept in keyed state.

use weir_api::prelude::*;

use crate::nexmark::model::{Auction, Event, Person};

/// The states q3 selects, and its category.
pub const STATES: [&str; 3] = ["OR", "ID", "CA"];
pub const CATEGORY: u64 = 10;

/// A result of q3.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct LocalItem {
    pub name: String,
    pub city: String,
    pub state: String,
    pub auction: u64,
}

/// What q3 keeps of a seller: name, city and state.
type Seller = (String, String, String);

/// Joins people and auctions by person id = seller, whichever arrives first.
#[derive(Clone)]
struct LocalItems;

impl KeyedCoProcessFunction<u64, Person, Auction, LocalItem> for LocalItems {
    /// The seller, once seen; the auctions waiting for their seller.
    type State = (ValueState<u64, Seller>, ListState<u64, u64>);

    fn state(&self) -> Self::State {
        (
            ValueState::new("person"),
            ListState::new("waiting-auctions"),
        )
    }

    fn process1(
        &mut self,
        key: &CurrentKey<'_, u64>,
        person: Person,
        (people, waiting): &mut Self::State,
        out: &mut Output<LocalItem>,
    ) -> Result<(), TaskError> {
        let seller = (person.name, person.city, person.state);
        for auction in waiting.take(key) {
            out.emit(item(&seller, auction));
        }
        people.set(key, seller);
        Ok(())
    }

    fn process2(
        &mut self,
        key: &CurrentKey<'_, u64>,
        auction: Auction,
        (people, waiting): &mut Self::State,
        out: &mut Output<LocalItem>,
    ) -> Result<(), TaskError> {
        match people.get(key) {
            Some(person) => out.emit(item(person, auction.id)),
            None => waiting.add(key, auction.id),
        }
        Ok(())
    }
}

fn item((name, city, state): &Seller, auction: u64) -> LocalItem {
    LocalItem {
        name: name.clone(),
        city: city.clone(),
        state: state.clone(),
        auction,
    }
}

/// ```sql
/// SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P
///   ON A.seller = P.id WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')
/// ```
pub fn q3(events: DataStream<Event>) -> DataStream<LocalItem> {
    let (people, auctions) = events
        .flat_map("q3-select", |e: Event| match e {
            Event::Person(p) if STATES.contains(&p.state.as_str()) => Some(Either::Left(*p)),
            Event::Auction(a) if a.category == CATEGORY => Some(Either::Right(*a)),
            _ => None,
        })
        .split();
    people
        .key_by(|p: &Person| p.id)
        .connect(auctions.key_by(|a: &Auction| a.seller))
        .process("q3-join", LocalItems)
}
