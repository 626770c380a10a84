//! Incremental checkpoints of keyed state: what the last completed checkpoint holds of a subtask's key groups, and the plan of which key groups the next checkpoint writes.
//!
//! Every (table, key group) of an incremental checkpoint is a *chain*: blobs in shared files,
//! the full contents first, then deltas. A checkpoint reuses the chain of the last completed
//! checkpoint for a key group that did not change since, appends a delta for one that changed a
//! little, and writes the full key group when there is no usable base or the chain grew long.
//! Shared files are reference-counted by the checkpoint coordinator's completed store: a file
//! is deleted only when no retained checkpoint references it.
//!
//! [`IncrementalBase`] lives with a keyed operator. The synchronous snapshot phase calls
//! [`IncrementalBase::plan`] (O(tables × key groups), independent of the number of keys); the
//! asynchronous worker encodes the plan ([`encode_incremental`](crate::encode_incremental)),
//! writes the files and records what it wrote ([`IncrementalBase::record_written`]); the task
//! hears of completion and abortion ([`IncrementalBase::complete`], [`IncrementalBase::abort`]).
//!
//! Invariant: a plan references a file only if the last completed checkpoint the task knows of
//! references it *and* every snapshot taken since (that may still complete) references it too.
//! The coordinator always retains the newest completed checkpoint, and a newer completion can
//! only come from one of those snapshots, so a referenced file is never deleted while a snapshot
//! that uses it may still complete, however late notifications arrive.

use crate::chain::Chain;
use crate::entry_codec::TableKind;
use crate::frozen_table::FrozenTable;
use crate::group::TOMBSTONE_EPOCHS;
use crate::snapshot_reader::KeyedSnapshotReader;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use weir_core::KeyGroupRange;

/// What the next checkpoint does with one key group of one table.
#[derive(Clone, Debug)]
pub enum GroupPlan {
    /// Unchanged since the base: reference the base's chain.
    Reuse(Chain),
    /// Changed: write the changes since the base's epoch and append them to the base's chain.
    Delta { since_epoch: u64, base: Chain },
    /// Write the whole key group, starting a new chain.
    Full,
}

/// The plan of one table: one [`GroupPlan`] per key group of its range, in order.
#[derive(Clone, Debug)]
pub struct TablePlan {
    pub name: String,
    pub groups: Vec<GroupPlan>,
}

/// The plan of one subtask's keyed snapshot, made in the synchronous phase.
#[derive(Debug)]
pub struct KeyedSnapshotPlan {
    pub checkpoint: u64,
    /// In the order of the frozen tables the plan was made for.
    pub tables: Vec<TablePlan>,
    /// Where the worker records what it wrote.
    pub base: IncrementalBase,
}

impl KeyedSnapshotPlan {
    /// A plan that writes every key group in full.
    pub fn full(checkpoint: u64, tables: &[Box<dyn FrozenTable>]) -> KeyedSnapshotPlan {
        KeyedSnapshotPlan {
            checkpoint,
            tables: tables
                .iter()
                .map(|t| TablePlan {
                    name: t.name().to_string(),
                    groups: vec![GroupPlan::Full; t.key_groups().len() as usize],
                })
                .collect(),
            base: IncrementalBase::new(),
        }
    }
}

/// The chains of every key group of one table as of one snapshot.
#[derive(Clone, Debug)]
struct TableChains {
    kind: TableKind,
    range: KeyGroupRange,
    /// The table's snapshot epoch: the chains hold every write up to it.
    epoch: u64,
    chains: Vec<Option<Chain>>,
}

impl TableChains {
    fn chain(&self, key_group: u32) -> Option<&Chain> {
        if !self.range.contains(key_group) {
            return None;
        }
        self.chains[(key_group - self.range.start) as usize].as_ref()
    }
}

/// A snapshot taken but not (yet) known to be completed or aborted.
#[derive(Debug, Default)]
struct PendingSnapshot {
    /// Per table: its epoch and the chain each key group will reference as a prefix (`None`
    /// for a full write).
    prefixes: HashMap<String, TableChains>,
    /// Filled in by the worker once the files are written.
    written: Option<HashMap<String, TableChains>>,
}

#[derive(Debug, Default)]
struct BaseState {
    /// The last completed checkpoint's chains, by table name.
    confirmed: HashMap<String, TableChains>,
    confirmed_checkpoint: Option<u64>,
    pending: BTreeMap<u64, PendingSnapshot>,
}

/// What the last completed checkpoint holds of one subtask's keyed state, shared between the
/// task (plans, notifications) and the snapshot workers (what they wrote). Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct IncrementalBase {
    inner: Arc<Mutex<BaseState>>,
}

impl IncrementalBase {
    /// No base: the first checkpoint writes every key group.
    pub fn new() -> IncrementalBase {
        IncrementalBase::default()
    }

    /// The base a restored subtask starts from: the chains of the restored incremental
    /// checkpoint for the key groups of `range`, at epoch 0 (the epoch a restore right after
    /// `init` puts the restored entries in). Key groups restored from a full checkpoint have
    /// no chain and are written in full next time.
    pub fn restored(reader: &KeyedSnapshotReader, range: KeyGroupRange) -> IncrementalBase {
        let mut confirmed = HashMap::new();
        for (name, kind) in reader.tables() {
            let chains = range
                .iter()
                .map(|g| reader.key_group_chain(name, g))
                .collect();
            let table = TableChains {
                kind,
                range,
                epoch: 0,
                chains,
            };
            confirmed.insert(name.to_string(), table);
        }
        let state = BaseState {
            confirmed,
            confirmed_checkpoint: None,
            pending: BTreeMap::new(),
        };
        IncrementalBase {
            inner: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BaseState> {
        // A worker that panicked while holding the lock left whole values behind: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The synchronous phase: decides for every key group of every table whether checkpoint
    /// `checkpoint` reuses, extends or rewrites its chain. O(tables × key groups).
    pub fn plan(&self, checkpoint: u64, tables: &[Box<dyn FrozenTable>]) -> KeyedSnapshotPlan {
        let mut state = self.lock();
        let mut plans = Vec::with_capacity(tables.len());
        let mut pending = PendingSnapshot::default();
        for table in tables {
            let range = table.key_groups();
            let epoch = table.snapshot_epoch();
            let base = state
                .confirmed
                .get(table.name())
                .filter(|b| b.kind == table.kind() && epoch >= b.epoch);
            let mut groups = Vec::with_capacity(range.len() as usize);
            let mut prefixes = Vec::with_capacity(range.len() as usize);
            for key_group in range.iter() {
                let plan = match base.and_then(|b| b.chain(key_group).map(|c| (b.epoch, c))) {
                    Some((base_epoch, chain))
                        if state.referenced_since_confirmed(table.name(), key_group, chain) =>
                    {
                        let modified = table.last_modified_epoch(key_group).unwrap_or(u64::MAX);
                        if modified <= base_epoch {
                            GroupPlan::Reuse(chain.clone())
                        } else if epoch - base_epoch >= TOMBSTONE_EPOCHS
                            || chain_is_long(chain, key_group)
                        {
                            GroupPlan::Full
                        } else {
                            GroupPlan::Delta {
                                since_epoch: base_epoch,
                                base: chain.clone(),
                            }
                        }
                    }
                    _ => GroupPlan::Full,
                };
                prefixes.push(match &plan {
                    GroupPlan::Reuse(c) | GroupPlan::Delta { base: c, .. } => Some(c.clone()),
                    GroupPlan::Full => None,
                });
                groups.push(plan);
            }
            pending.prefixes.insert(
                table.name().to_string(),
                TableChains {
                    kind: table.kind(),
                    range,
                    epoch,
                    chains: prefixes,
                },
            );
            plans.push(TablePlan {
                name: table.name().to_string(),
                groups,
            });
        }
        state.pending.insert(checkpoint, pending);
        KeyedSnapshotPlan {
            checkpoint,
            tables: plans,
            base: self.clone(),
        }
    }

    /// The worker wrote checkpoint `checkpoint`: `chains[t][i]` is the chain of key group
    /// `range.start + i` of the `t`-th table of the plan.
    pub fn record_written(&self, plan: &KeyedSnapshotPlan, chains: Vec<Vec<Chain>>) {
        let mut state = self.lock();
        let Some(pending) = state.pending.get_mut(&plan.checkpoint) else {
            return; // already aborted or subsumed
        };
        let mut written = HashMap::new();
        for (table, chains) in plan.tables.iter().zip(chains) {
            if let Some(planned) = pending.prefixes.get(&table.name) {
                let chains = chains.into_iter().map(Some).collect();
                written.insert(
                    table.name.clone(),
                    TableChains {
                        chains,
                        ..planned.clone()
                    },
                );
            }
        }
        pending.written = Some(written);
    }

    /// Checkpoint `checkpoint` completed: its chains become the base, and older snapshots
    /// are subsumed. A completed snapshot that was written in full (a savepoint, or with
    /// incremental checkpoints off) references no shared file and evicts nothing: the base
    /// stays. A notice for a checkpoint this subtask took no snapshot for changes nothing.
    pub fn complete(&self, checkpoint: u64) {
        let mut state = self.lock();
        if state.confirmed_checkpoint.is_some_and(|c| c >= checkpoint) {
            return;
        }
        let Some(snapshot) = state.pending.remove(&checkpoint) else {
            return;
        };
        if let Some(written) = snapshot.written {
            state.confirmed = written;
            state.confirmed_checkpoint = Some(checkpoint);
            let newer = state.pending.split_off(&checkpoint);
            state.pending = newer;
        }
    }

    /// Checkpoint `checkpoint` was aborted (declined, expired or subsumed): its snapshot will
    /// never complete, so it no longer constrains what later snapshots may reference.
    pub fn abort(&self, checkpoint: u64) {
        self.lock().pending.remove(&checkpoint);
    }

    /// The snapshot epoch of `table` in the base: from now on every delta of that table is
    /// taken since this epoch or a later one. `None` if the base holds no such table.
    pub fn confirmed_epoch(&self, table: &str) -> Option<u64> {
        self.lock().confirmed.get(table).map(|t| t.epoch)
    }

    /// The checkpoint whose chains are the base, if any.
    pub fn confirmed_checkpoint(&self) -> Option<u64> {
        self.lock().confirmed_checkpoint
    }
}

impl BaseState {
    /// Whether every snapshot taken after the base references `chain` as a prefix of its
    /// chain for this key group (see the module's invariant).
    fn referenced_since_confirmed(&self, table: &str, key_group: u32, chain: &Chain) -> bool {
        self.pending.values().all(|snapshot| {
            let Some(planned) = snapshot.prefixes.get(table) else {
                return true; // that snapshot had no such table: it references nothing of it
            };
            if !planned.range.contains(key_group) {
                return true;
            }
            match &planned.chains[(key_group - planned.range.start) as usize] {
                Some(prefix) => is_prefix(chain, prefix),
                None => false,
            }
        })
    }
}

fn is_prefix(short: &Chain, long: &Chain) -> bool {
    Arc::ptr_eq(short, long) || (short.len() <= long.len() && long[..short.len()] == short[..])
}

/// The longest chain a key group keeps before it is written in full again: staggered by key
/// group so that not every key group starts a new chain in the same checkpoint.
pub const MAX_CHAIN_LEN: usize = 48;

/// How many times its full contents a key group's deltas may add up to before it is written
/// in full again, plus up to 7/8 more staggered by key group (key groups of a table change
/// alike, and without the stagger all of them are rewritten in the same checkpoint).
///
/// Every rewrite encodes the whole key group again, so a larger ratio writes less: with deltas
/// of `d` bytes per checkpoint a checkpoint writes `d × (1 + 1 / ratio)` on average (2d at a
/// ratio of 1). It also bounds what a restore reads and the space a chain keeps: at most about
/// `1 + ratio + 1` times the key group's contents when it was last written in full.
pub const MAX_DELTA_RATIO: u64 = 2;

/// Whether a changed key group should start a new chain rather than append a delta: its chain
/// reached its length limit, or its deltas outgrew [`MAX_DELTA_RATIO`] times its full contents.
fn chain_is_long(chain: &Chain, key_group: u32) -> bool {
    let limit = MAX_CHAIN_LEN + (key_group % 16) as usize;
    let full = chain.first().map_or(0, |b| b.len);
    let deltas: u64 = chain.iter().skip(1).map(|b| b.len).sum();
    let ratio_in_eighths = MAX_DELTA_RATIO * 8 + u64::from(key_group % 8);
    chain.len() >= limit || deltas.saturating_mul(8) > full.saturating_mul(ratio_in_eighths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{ChainBlob, SharedStateFile};

    fn chain(lens: &[u64]) -> Chain {
        let file = Arc::new(SharedStateFile {
            path: "shared/1".into(),
            size: lens.iter().sum(),
            checksum: 0,
        });
        let mut offset = 0;
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                offset += len;
                ChainBlob {
                    file: file.clone(),
                    offset: offset - len,
                    len,
                    delta: i > 0,
                }
            })
            .collect()
    }

    #[test]
    fn a_chain_is_rewritten_once_its_deltas_outgrow_the_ratio_staggered_by_key_group() {
        // Key group 0: exactly twice the full contents is still fine, a byte more is not.
        assert!(!chain_is_long(&chain(&[1_000, 1_000, 1_000]), 0));
        assert!(chain_is_long(&chain(&[1_000, 1_000, 1_001]), 0));
        // Key group 7 allows 7/8 more.
        assert!(!chain_is_long(&chain(&[1_000, 1_000, 1_875]), 7));
        assert!(chain_is_long(&chain(&[1_000, 1_000, 1_876]), 7));
        // The same chain is rewritten in different checkpoints in different key groups.
        let growing: Vec<u64> = std::iter::once(8_000).chain([1_000; 30]).collect();
        let rewritten_after = |key_group| {
            (2..growing.len())
                .find(|&n| chain_is_long(&chain(&growing[..n]), key_group))
                .unwrap()
        };
        let firsts: std::collections::BTreeSet<usize> = (0..8).map(rewritten_after).collect();
        assert_eq!(firsts.len(), 8, "{firsts:?}");
    }

    #[test]
    fn a_chain_is_rewritten_at_its_length_limit_however_small_its_deltas() {
        let tiny = |n: usize| {
            let mut lens = vec![1_000_000];
            lens.extend(std::iter::repeat_n(1, n - 1));
            chain(&lens)
        };
        assert!(!chain_is_long(&tiny(MAX_CHAIN_LEN - 1), 0));
        assert!(chain_is_long(&tiny(MAX_CHAIN_LEN), 0));
        assert!(!chain_is_long(&tiny(MAX_CHAIN_LEN), 15));
        assert!(chain_is_long(&tiny(MAX_CHAIN_LEN + 15), 15));
    }
}
