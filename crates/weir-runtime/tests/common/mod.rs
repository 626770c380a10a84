//! What the operator tests driven by hand share: a subtask's context over every key group,
//! an output whose records can be read back, and a restore from an operator's snapshot.

use crossbeam_channel::Receiver;
use weir_core::{Element, KeyGroupRange};
use weir_runtime::channel::ChannelSink;
use weir_runtime::operator::{OperatorContext, OperatorSnapshot, RestoredState};
use weir_runtime::partition::RoundRobinWriter;
use weir_runtime::Output;
use weir_state::{encode_keyed_snapshot, KeyedSnapshotReader};

/// The number of key groups of the tests.
pub const MP: u32 = 16;

/// The context of the only subtask of operator `uid`: every key group, in the state backend
/// `WEIR_STATE_BACKEND_TYPE` names (the heap by default; the test command runs these tests
/// once per backend).
pub fn ctx(uid: &str) -> OperatorContext {
    OperatorContext {
        uid: uid.into(),
        name: uid.into(),
        index: 0,
        parallelism: 1,
        max_parallelism: MP,
        key_groups: KeyGroupRange::new(0, MP),
        state_backend: weir_core::config::StateBackendConfig::from_env().unwrap(),
        metrics: Default::default(),
    }
}

/// An output, and where its records arrive.
pub fn output<T: Clone + Send + 'static>() -> (Output<T>, Receiver<Element<T>>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let sink: Box<dyn ChannelSink<T>> = Box::new(tx);
    let writer = RoundRobinWriter::new(vec![sink], 0);
    (Output::new(vec![Box::new(writer)], 1), rx)
}

/// The records emitted since the last call, in order.
pub fn emitted<T>(rx: &Receiver<Element<T>>) -> Vec<T> {
    rx.try_iter()
        .flat_map(|e| match e {
            Element::Records(r) => r,
            _ => Vec::new(),
        })
        .collect()
}

/// What an operator restored from `snapshot` (its keyed state, encoded and decoded) opens with.
pub fn restored_from(snapshot: &OperatorSnapshot) -> RestoredState {
    let bytes = encode_keyed_snapshot(&snapshot.keyed, KeyGroupRange::new(0, MP)).unwrap();
    RestoredState {
        keyed: Some(KeyedSnapshotReader::decode(&bytes).unwrap()),
        ..Default::default()
    }
}
