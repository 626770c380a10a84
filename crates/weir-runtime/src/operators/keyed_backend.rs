//! The keyed-state plumbing every keyed operator of the runtime shares — keyed process and
//! co-process functions, windows and joins: opening its state tables and timers (restored or
//! fresh), firing due timers, taking the synchronous snapshot with its incremental plan, and
//! following checkpoint completion.

use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::config::StateBackendKind;
use weir_core::{CheckpointId, Clock, SystemClock};
use weir_state::{CurrentKey, IncrementalBase, Key, KeyedStateSet};

use crate::error::TaskError;
use crate::operator::{OperatorContext, OperatorSnapshot, RestoredState};
use crate::timer_service::{
    check_reserved_names, fire_due, TimeDomain, Timer, TimerContext, TimerService,
};

/// What a due timer is handed to: its key, the timer, and a context to register more.
pub trait OnTimer<K: Key>:
    FnMut(&CurrentKey<'_, K>, Timer, &mut TimerContext<'_, K>) -> Result<(), TaskError>
{
}

impl<K: Key, F> OnTimer<K> for F where
    F: FnMut(&CurrentKey<'_, K>, Timer, &mut TimerContext<'_, K>) -> Result<(), TaskError>
{
}

/// The timers and incremental-checkpoint base of one keyed operator subtask, next to the
/// operator's own state tables.
pub struct KeyedBackend<K> {
    pub timers: TimerService<K>,
    base: IncrementalBase,
    pub max_parallelism: u32,
    /// With `state.backend.type: rocksdb`, the subtask's RocksDB (timers stay on the heap).
    #[cfg(feature = "rocksdb")]
    lsm: Option<Arc<weir_state::lsm::LsmStore>>,
    /// Where the RocksDB figures go.
    #[cfg(feature = "rocksdb")]
    metrics: Arc<crate::metrics::SubtaskMetrics>,
    /// When they were last read.
    #[cfg(feature = "rocksdb")]
    usage_read: Option<std::time::Instant>,
}

impl<K: Key> KeyedBackend<K> {
    /// Opens `state` (whose tables may be keyed by any key type in `K`'s key groups) and the
    /// timers, restoring both from `restored`.
    pub fn open<SK: Key, S: KeyedStateSet<SK>>(
        state: S,
        clock: Option<Arc<dyn Clock>>,
        ctx: &OperatorContext,
        restored: &mut RestoredState,
    ) -> Result<(KeyedBackend<K>, S), TaskError> {
        check_reserved_names(&state, &ctx.uid)?;
        let (state, _lsm) = open_state(state, ctx, restored)?;
        let backend = KeyedBackend {
            timers: open_timers(clock, ctx, restored)?,
            base: restored_base(ctx, restored),
            max_parallelism: ctx.max_parallelism,
            #[cfg(feature = "rocksdb")]
            lsm: _lsm,
            #[cfg(feature = "rocksdb")]
            metrics: ctx.metrics.clone(),
            #[cfg(feature = "rocksdb")]
            usage_read: None,
        };
        Ok((backend, state))
    }

    /// Between batches: the state tables' upkeep (see [`KeyedStateSet::maintain`]).
    pub fn maintain<SK: Key, S: KeyedStateSet<SK>>(
        &mut self,
        state: &mut S,
    ) -> Result<(), TaskError> {
        state.advance_time(self.processing_time());
        state.maintain()?;
        #[cfg(feature = "rocksdb")]
        self.report_usage();
        Ok(())
    }

    /// Whether the state tables live in RocksDB (`state.backend.type: rocksdb`).
    #[cfg(feature = "rocksdb")]
    pub fn uses_lsm(&self) -> bool {
        self.lsm.is_some()
    }

    /// The processing time state with a time to live expires against: the timers' clock.
    fn processing_time(&self) -> u64 {
        u64::try_from(self.timers.processing_time()).unwrap_or(0)
    }

    /// About once a second, what the subtask's RocksDB uses, into its metrics (RocksDB's
    /// figures take a lock of its own to read: not once a batch).
    #[cfg(feature = "rocksdb")]
    fn report_usage(&mut self) {
        let Some(store) = &self.lsm else { return };
        let now = std::time::Instant::now();
        if self
            .usage_read
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.usage_read = Some(now);
        self.metrics.set_rocksdb(store.usage());
    }

    /// The synchronous snapshot of `state` and the timers, O(tables × key groups). With
    /// RocksDB, the snapshot of the database goes along (see [`OperatorSnapshot::lsm`]).
    pub fn snapshot<SK: Key, S: KeyedStateSet<SK>>(
        &mut self,
        checkpoint: CheckpointId,
        state: &mut S,
    ) -> Result<OperatorSnapshot, TaskError> {
        // A RocksDB failure met by a read since the last batch fails the task here, before a
        // checkpoint could hold what the read got wrong.
        state.advance_time(self.processing_time());
        state.maintain()?;
        let mut keyed = Vec::new();
        #[cfg(feature = "rocksdb")]
        if let Some(store) = &self.lsm {
            store.begin_snapshot(checkpoint.0);
            state.snapshot(&mut keyed);
            let lsm = store.end_snapshot(checkpoint.0);
            // Timers stay on the heap, checkpointed incrementally like heap tables: the plan
            // covers them alone.
            let mut timers = Vec::new();
            self.timers.snapshot(&mut timers);
            let plan = self.base.plan(checkpoint.0, &timers);
            keyed.extend(timers);
            return Ok(OperatorSnapshot {
                keyed,
                operator: None,
                incremental: Some(plan),
                lsm,
                channels: None,
            });
        }
        state.snapshot(&mut keyed);
        self.timers.snapshot(&mut keyed);
        let plan = self.base.plan(checkpoint.0, &keyed);
        Ok(OperatorSnapshot {
            keyed,
            operator: None,
            incremental: Some(plan),
            lsm: None,
            channels: None,
        })
    }

    /// Checkpoint `checkpoint` completed: it may be the new incremental base, and the tables
    /// of `state` and the timers forget removals no later delta needs.
    pub fn complete<SK: Key, S: KeyedStateSet<SK>>(
        &mut self,
        checkpoint: CheckpointId,
        state: &mut S,
    ) {
        complete(&self.base, checkpoint, Some(state), Some(&mut self.timers));
        #[cfg(feature = "rocksdb")]
        if let Some(store) = &self.lsm {
            store.complete(checkpoint.0);
        }
    }

    pub fn abort(&mut self, checkpoint: CheckpointId) {
        self.base.abort(checkpoint.0);
        #[cfg(feature = "rocksdb")]
        if let Some(store) = &self.lsm {
            store.abort(checkpoint.0);
        }
    }

    /// Event time reached `watermark`: every event-time timer due fires, in time order.
    pub fn advance_watermark(
        &mut self,
        watermark: i64,
        on_timer: impl OnTimer<K>,
    ) -> Result<(), TaskError> {
        self.timers.advance_watermark(watermark);
        self.fire(TimeDomain::EventTime, watermark, on_timer)
    }

    /// Every processing-time timer due by now fires, in time order.
    pub fn fire_processing_timers(&mut self, on_timer: impl OnTimer<K>) -> Result<(), TaskError> {
        let now = self.timers.processing_time();
        self.fire(TimeDomain::ProcessingTime, now, on_timer)
    }

    fn fire(
        &mut self,
        domain: TimeDomain,
        limit: i64,
        mut on_timer: impl OnTimer<K>,
    ) -> Result<(), TaskError> {
        fire_due(&mut self.timers, domain, limit, |timers, key, timer| {
            let mut ctx = TimerContext::new(key, timers);
            on_timer(key, timer, &mut ctx)
        })
    }
}

/// A keyed operator's backend and state tables, once the operator is open.
pub struct KeyedSlot<K, S>(Option<(KeyedBackend<K>, S)>);

impl<K, S> Default for KeyedSlot<K, S> {
    fn default() -> Self {
        KeyedSlot(None)
    }
}

impl<K: Key, S> KeyedSlot<K, S> {
    /// Opens the backend and `state` (restored from `restored`).
    pub fn open<SK: Key>(
        &mut self,
        state: S,
        clock: Option<Arc<dyn Clock>>,
        ctx: &OperatorContext,
        restored: &mut RestoredState,
    ) -> Result<(), TaskError>
    where
        S: KeyedStateSet<SK>,
    {
        self.0 = Some(KeyedBackend::open(state, clock, ctx, restored)?);
        Ok(())
    }

    /// The backend and the state tables.
    ///
    /// # Panics
    /// Before [`open`](Self::open): the task loop opens every operator before it hands it
    /// anything.
    ///
    /// Between batches it is also where the state tables' upkeep happens (see
    /// [`KeyedStateSet::maintain`]), so an error of the state backend fails the task here.
    pub fn opened<SK: Key>(&mut self) -> Result<(&mut KeyedBackend<K>, &mut S), TaskError>
    where
        S: KeyedStateSet<SK>,
    {
        let (backend, state) = self.0.as_mut().expect("opened before processing");
        backend.maintain(state)?;
        Ok((backend, state))
    }

    pub fn next_processing_timer(&self) -> Option<Duration> {
        self.0.as_ref()?.0.timers.until_next_processing_timer()
    }

    pub fn snapshot<SK: Key>(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<OperatorSnapshot, TaskError>
    where
        S: KeyedStateSet<SK>,
    {
        match self.0.as_mut() {
            Some((backend, state)) => backend.snapshot(checkpoint, state),
            None => Ok(OperatorSnapshot::default()),
        }
    }

    pub fn complete<SK: Key>(&mut self, checkpoint: CheckpointId)
    where
        S: KeyedStateSet<SK>,
    {
        if let Some((backend, state)) = self.0.as_mut() {
            backend.complete(checkpoint, state);
        }
    }

    pub fn abort(&mut self, checkpoint: CheckpointId) {
        if let Some((backend, _)) = self.0.as_mut() {
            backend.abort(checkpoint);
        }
    }
}

/// Checkpoint `checkpoint` completed: it may become the incremental base, and the tables of
/// `state` and the timers forget the removals no later delta needs.
fn complete<K: Key, SK: Key, S: KeyedStateSet<SK>>(
    base: &IncrementalBase,
    checkpoint: CheckpointId,
    state: Option<&mut S>,
    timers: Option<&mut TimerService<K>>,
) {
    base.complete(checkpoint.0);
    let confirmed_epoch = |table: &str| base.confirmed_epoch(table);
    if let Some(state) = state {
        state.forget_removals(&confirmed_epoch);
    }
    if let Some(timers) = timers {
        timers.forget_removals(&confirmed_epoch);
    }
}

/// Creates the timer service of a keyed operator subtask and loads its restored timers.
fn open_timers<K: Key>(
    clock: Option<Arc<dyn Clock>>,
    ctx: &OperatorContext,
    restored: &RestoredState,
) -> Result<TimerService<K>, TaskError> {
    let clock = clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
    let mut timers = TimerService::new(clock);
    timers.init(ctx.max_parallelism, ctx.key_groups);
    if let Some(reader) = &restored.keyed {
        timers.restore(reader)?;
    }
    Ok(timers)
}

/// With `state.backend.type: rocksdb`, the subtask's RocksDB.
#[cfg(feature = "rocksdb")]
type Lsm = Option<Arc<weir_state::lsm::LsmStore>>;
/// Without the `rocksdb` feature there is never one.
#[cfg(not(feature = "rocksdb"))]
type Lsm = Option<std::convert::Infallible>;

/// Creates a function's state tables for this subtask, in the backend the job chose, and loads
/// restored state into them.
fn open_state<K: Key, S: KeyedStateSet<K>>(
    mut state: S,
    ctx: &OperatorContext,
    restored: &mut RestoredState,
) -> Result<(S, Lsm), TaskError> {
    let mut names = Vec::new();
    state.names(&mut names);
    let mut sorted = names.clone();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(TaskError::user(format!(
            "operator '{}' declares keyed state '{}' twice",
            ctx.uid, w[0]
        )));
    }
    state.init(ctx.max_parallelism, ctx.key_groups);
    let lsm = use_backend(&mut state, &names, ctx, restored)?;
    if let Some(reader) = &restored.keyed {
        // After the restore's read (which the deployment logs): the keys decoded into the
        // tables, and with RocksDB written into the database — the longer part there.
        let started = Instant::now();
        state.restore(reader)?;
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            operator = %ctx.uid,
            subtask = ctx.index,
            ms,
            "restored keyed state loaded into the {:?} backend in {ms} ms",
            ctx.state_backend.kind
        );
    }
    Ok((state, lsm))
}

/// Moves the tables to the backend `ctx` names (they start on the heap).
fn use_backend<K: Key, S: KeyedStateSet<K>>(
    _state: &mut S,
    _names: &[String],
    ctx: &OperatorContext,
    _restored: &mut RestoredState,
) -> Result<Lsm, TaskError> {
    match ctx.state_backend.kind {
        StateBackendKind::HashMap => Ok(None),
        #[cfg(feature = "rocksdb")]
        StateBackendKind::RocksDb => {
            if _names.is_empty() {
                return Ok(None);
            }
            let options = weir_state::lsm::LsmOptions {
                local_dir: ctx.state_backend.rocksdb_local_dir.clone(),
                memory_bytes: ctx.state_backend.rocksdb_memory,
            };
            let label = format!("{}-{}", ctx.uid, ctx.index);
            let mut ttl = Vec::new();
            _state.compaction_filters(&mut ttl);
            // The database restored in place, if the restore fetched one for this subtask.
            let native = _restored.native.take();
            let held = native.as_ref().map(|n| n.key_groups());
            if let Some(native) = &native {
                let (held, ours) = (native.key_groups(), ctx.key_groups);
                if held.start >= ours.end
                    || ours.start >= held.end
                    || native.max_parallelism() != ctx.max_parallelism
                {
                    return Err(TaskError::user(format!(
                        "operator '{}' subtask {}: the RocksDB database restored for key groups {} of {} holds none of this subtask's, key groups {} of {}",
                        ctx.uid,
                        ctx.index,
                        native.key_groups(),
                        native.max_parallelism(),
                        ctx.key_groups,
                        ctx.max_parallelism
                    )));
                }
            }
            let store = weir_state::lsm::LsmStore::open(&options, &label, _names, &ttl, native)?;
            if let Some(held) = held.filter(|held| *held != ctx.key_groups) {
                // Restored from a subtask whose key groups were not all this one's: keep its
                // share (the rest comes from the other old subtasks, read out).
                store.clip(held, ctx.key_groups)?;
            }
            _state.use_lsm(&store)?;
            Ok(Some(store))
        }
        #[cfg(not(feature = "rocksdb"))]
        StateBackendKind::RocksDb => Err(TaskError::user(ROCKSDB_MISSING)),
    }
}

/// Why `state.backend.type: rocksdb` fails in a build without the backend.
pub const ROCKSDB_MISSING: &str = "state.backend.type is rocksdb, but this build of Weir has no RocksDB state backend: build it with `--features rocksdb` (which needs Debian's librocksdb-dev and libclang-dev; scripts/rocksdb.sh installs them)";

/// The incremental base of a restored subtask: the chains of the checkpoint it restored from
/// (empty on a fresh start, or after a restore from a full checkpoint).
fn restored_base(ctx: &OperatorContext, restored: &RestoredState) -> IncrementalBase {
    match &restored.keyed {
        Some(reader) => IncrementalBase::restored(reader, ctx.key_groups),
        None => IncrementalBase::new(),
    }
}
