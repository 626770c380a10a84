//! Operator chaining: a one-input operator whose only input is a forward edge from an operator
//! of equal parallelism in the same process runs in its producer's task loop, called directly
//! instead of through a channel and a thread of its own.
//!
//! A chained operator stays an operator of its own: its subtask id, state, snapshot,
//! acknowledgement, metrics and checkpoint notifications are its own, as unchained. Only the
//! way its input reaches it changes. Its producer's output hands it every element its channel
//! would have carried — batches, watermarks, statuses, barriers, end of input — in the same
//! order, through a [`ChannelSink`](crate::channel::ChannelSink) that handles each one at once on the producer's thread. So
//! a barrier finds it exactly where a channel's consumer would have been when the barrier came
//! out of the channel: it snapshots then and passes the barrier on (the `chained` module
//! runs it).
//!
//! What needs the task loop itself goes through the head of the chain, the subtask that has a
//! thread: opening; checkpoint notifications, sent to the head's control channel wrapped in
//! [`TaskControl::Chained`]; processing-time timers and the buffer timeout of a chained
//! operator's output. The head's [`Chain`] holds every operator chained behind it, nearest
//! first, and its loop drives them.
//!
//! Chaining changes nothing that is stored: a checkpoint taken with chaining on restores with
//! it off, and the other way round. A chained operator has no input channel, so an unaligned
//! checkpoint holds no in-flight data for it; restored from one taken while it was not
//! chained, it replays what its channel held when it opens, before its producer emits anything.
//!
//! Back-pressure is the thread's: every operator of a chain reports the time its thread
//! waited on full channels, wherever in the chain the wait happened.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use weir_core::SubtaskId;

use crate::control::TaskControl;
use crate::error::TaskError;

/// What the head of a chain does for an operator chained behind it.
pub(crate) trait ChainMember: Send {
    fn subtask(&self) -> SubtaskId;
    /// Opens the operator (with its restored state) on the head's thread, before the head
    /// reads any input.
    fn open(&mut self) -> Result<(), TaskError>;
    /// A checkpoint notification (other controls are the head's).
    fn control(&mut self, control: TaskControl) -> Result<(), TaskError>;
    /// When the operator next needs the loop: a processing-time timer, or records its output
    /// has held for the buffer timeout.
    fn deadline(&self) -> Option<Instant>;
    /// Fires what is due at `now`.
    fn on_time(&mut self, now: Instant) -> Result<(), TaskError>;
}

/// One operator chained behind a head. Shared by the head's [`Chain`] and the sink its
/// producer's output writes into; both are used only on the head's thread, so the lock is
/// never contended (it is taken once per batch or control, never per record).
#[derive(Clone)]
pub struct ChainLink(Arc<Mutex<dyn ChainMember>>);

impl ChainLink {
    pub(crate) fn new(member: Arc<Mutex<dyn ChainMember>>) -> ChainLink {
        ChainLink(member)
    }

    fn lock(&self) -> Result<MutexGuard<'_, dyn ChainMember + 'static>, TaskError> {
        self.0.lock().map_err(|_| poisoned())
    }
}

/// The error of a chained operator whose lock a panic poisoned (the panic itself fails the
/// head's subtask first).
pub(crate) fn poisoned() -> TaskError {
    TaskError::Panic("a chained operator panicked earlier".into())
}

/// The operators chained behind one head, nearest first (an operator's own followers come
/// right after it).
#[derive(Clone, Default)]
pub struct Chain {
    links: Vec<ChainLink>,
}

impl Chain {
    pub(crate) fn new(links: Vec<ChainLink>) -> Chain {
        Chain { links }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Opens the chain from its far end: an operator's consumers are open before it is, so
    /// what it emits while opening (the channel state it replays) finds them ready.
    pub(crate) fn open(&self) -> Result<(), TaskError> {
        self.links.iter().rev().try_for_each(|l| l.lock()?.open())
    }

    /// The earliest deadline of any chained operator.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        for link in &self.links {
            let Ok(member) = link.lock() else {
                // Poisoned: the head's next call to `on_time` reports it.
                return Some(Instant::now());
            };
            if let Some(d) = member.deadline() {
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
            }
        }
        earliest
    }

    /// Fires what is due, nearest operator first: what one flushes reaches the next before
    /// the next looks at its own buffer.
    pub(crate) fn on_time(&self, now: Instant) -> Result<(), TaskError> {
        self.links.iter().try_for_each(|l| l.lock()?.on_time(now))
    }

    /// Hands a control sent to a chained subtask to it.
    pub(crate) fn control(
        &self,
        subtask: SubtaskId,
        control: TaskControl,
    ) -> Result<(), TaskError> {
        for link in &self.links {
            let mut member = link.lock()?;
            if member.subtask() == subtask {
                return member.control(control);
            }
        }
        Ok(())
    }
}
