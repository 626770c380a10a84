//! The job graph: operators (nodes) with their parallelism and stable uids, and the edges
//! between them. Types are erased here so that one graph can hold operators of any record
//! types; they are recovered once, at deployment, never per record.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_core::{Data, OperatorId};
use weir_state::StableHash;

use crate::channel::{self, ChannelSink, Either};
use crate::channel_state::ChannelStateCodec;
use crate::error::{JobError, TaskError};
use crate::gate::InputGate;
use crate::operator::{OneInputOperator, SourceFunction};
use crate::output::Output;
use crate::partition::{BroadcastWriter, EdgeWriter, HashWriter, Partition, RoundRobinWriter};
use crate::remote::{
    remote_receiver, remote_sink, CreditReturn, FrameDecoder, FrameWriter, InputChannel,
};
use crate::task::{run_one_input, run_source, run_source_with_watermarks, TaskRuntime};
use crate::watermark::{SourceWatermarkDriver, WatermarkGenerator, WatermarkStrategy};

/// A type-erased value whose type the graph's factories know.
pub type Erased = Box<dyn Any + Send>;

/// What a deployed subtask runs.
pub type SubtaskBody = Box<dyn FnOnce() -> Result<(), TaskError> + Send>;

/// Builds one subtask from its input receivers and output edge writers.
pub type NodeFactory =
    Arc<dyn Fn(Vec<Erased>, Vec<Erased>, TaskRuntime) -> Result<SubtaskBody, String> + Send + Sync>;

/// Builds a subtask chained behind its producer (see [`crate::chain`]) from its output edge
/// writers: the sink its producer's writer sends into, and the link the head of its chain
/// drives.
pub type ChainFactory = Arc<
    dyn Fn(Vec<Erased>, TaskRuntime) -> Result<(Erased, crate::chain::ChainLink), String>
        + Send
        + Sync,
>;

/// Makes the channels of an edge, typed by its records: in-process ones, and the two ends of
/// one to or from another process (cluster mode).
#[derive(Clone)]
pub struct ChannelFactory {
    /// An in-process channel of the given capacity: (producer's `Box<dyn ChannelSink<T>>`,
    /// consumer's [`InputChannel`]).
    pub local: Arc<dyn Fn(usize) -> (Erased, Erased) + Send + Sync>,
    /// The producer's end of a channel to another process, sending through the frame writer.
    pub remote_out: Arc<dyn Fn(Box<dyn FrameWriter>) -> Erased + Send + Sync>,
    /// The consumer's end of a channel from another process, with a queue of the given
    /// capacity: the decoder that fills it, and what makes the [`InputChannel`] once the
    /// network says how credits go back.
    pub remote_in: Arc<dyn Fn(usize) -> (FrameDecoder, RemoteInput) + Send + Sync>,
}

/// Completes a remote input channel with its credit return.
pub type RemoteInput = Box<dyn FnOnce(CreditReturn) -> Erased + Send>;

/// Makes a producer subtask's writer for an edge from its channels (one per consumer subtask
/// it talks to): `(partition, channels, producer index, max parallelism, batch size)`.
pub type WriterFactory =
    Arc<dyn Fn(Partition, Vec<Erased>, usize, u32, usize) -> Erased + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    Source,
    Operator,
    Sink,
}

/// Whether an operator may share its producer's task loop, or its consumers its own (Flink's
/// chaining strategies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Chaining {
    /// Chained behind its producer when it can be, and its consumers behind it.
    #[default]
    Always,
    /// Starts a chain: never behind its producer, but its consumers may be chained behind it.
    Head,
    /// Never chained, to its producer or its consumers.
    Never,
}

/// One operator of the job.
#[derive(Clone)]
pub struct Node {
    pub uid: String,
    pub name: String,
    pub parallelism: u32,
    pub role: NodeRole,
    pub keyed: bool,
    pub factory: NodeFactory,
    /// How the operator runs when chained behind its producer; `None` if it cannot be (a
    /// source, or an operator of two inputs).
    pub chain: Option<ChainFactory>,
    pub chaining: Chaining,
}

impl Node {
    pub fn id(&self) -> OperatorId {
        OperatorId::from_uid(&self.uid)
    }
}

/// A connection from one node's output to one input of another.
#[derive(Clone)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub partition: Partition,
    pub channel: ChannelFactory,
    pub writer: WriterFactory,
}

/// A whole job: what the executor deploys.
#[derive(Clone)]
pub struct JobGraph {
    pub name: String,
    pub max_parallelism: u32,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// Whether operators are chained where they can be (`pipeline.operator-chaining.enabled`).
    pub operator_chaining: bool,
}

impl JobGraph {
    /// Checks what must hold before deployment: unique uids, sane parallelism, forward edges
    /// between equal parallelism.
    pub fn validate(&self) -> Result<(), JobError> {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for node in &self.nodes {
            if let Some(other) = seen.insert(&node.uid, &node.name) {
                return Err(JobError::InvalidJob(format!(
                    "duplicate operator uid '{}' (operators '{other}' and '{}'); give each operator a distinct name or .uid()",
                    node.uid, node.name
                )));
            }
            if node.parallelism == 0 || node.parallelism > self.max_parallelism {
                return Err(JobError::InvalidJob(format!(
                    "operator '{}' has parallelism {}; it must be between 1 and pipeline.max-parallelism ({})",
                    node.uid, node.parallelism, self.max_parallelism
                )));
            }
        }
        for edge in &self.edges {
            let (from, to) = (&self.nodes[edge.from], &self.nodes[edge.to]);
            if edge.partition == Partition::Forward && from.parallelism != to.parallelism {
                return Err(JobError::InvalidJob(format!(
                    "forward edge from '{}' (parallelism {}) to '{}' (parallelism {}) needs equal parallelism; use rebalance",
                    from.uid, from.parallelism, to.uid, to.parallelism
                )));
            }
        }
        Ok(())
    }

    /// Per edge: whether its consumer runs chained behind its producer, in the producer's task
    /// loop, wherever the two subtasks of a pair run in the same process. It does when chaining
    /// is on, the edge is forward, the consumer reads this edge alone and can be chained, and
    /// neither operator asks otherwise ([`Chaining`]).
    pub fn chained_edges(&self) -> Vec<bool> {
        let mut inputs = vec![0usize; self.nodes.len()];
        for edge in &self.edges {
            inputs[edge.to] += 1;
        }
        self.edges
            .iter()
            .map(|edge| {
                let (from, to) = (&self.nodes[edge.from], &self.nodes[edge.to]);
                self.operator_chaining
                    // Deployment builds a consumer before its producer.
                    && edge.from < edge.to
                    && self.resolved_partition(edge) == Partition::Forward
                    && from.parallelism == to.parallelism
                    && inputs[edge.to] == 1
                    && to.chain.is_some()
                    && to.chaining == Chaining::Always
                    && from.chaining != Chaining::Never
            })
            .collect()
    }

    /// The edge's partitioning with `Default` resolved as Flink does.
    pub fn resolved_partition(&self, edge: &Edge) -> Partition {
        match edge.partition {
            Partition::Default
                if self.nodes[edge.from].parallelism == self.nodes[edge.to].parallelism =>
            {
                Partition::Forward
            }
            Partition::Default => Partition::Rebalance,
            p => p,
        }
    }
}

fn downcast<T: 'static>(value: Erased, what: &str) -> Result<T, String> {
    value
        .downcast::<T>()
        .map(|b| *b)
        .map_err(|_| format!("internal type mismatch for {what}"))
}

fn writers<T: 'static>(outputs: Vec<Erased>) -> Result<Vec<Box<dyn EdgeWriter<T>>>, String> {
    outputs
        .into_iter()
        .map(|o| downcast::<Box<dyn EdgeWriter<T>>>(o, "an output edge"))
        .collect()
}

fn receivers<I: 'static>(inputs: Vec<Erased>) -> Result<Vec<InputChannel<I>>, String> {
    inputs
        .into_iter()
        .map(|i| downcast::<InputChannel<I>>(i, "an input channel"))
        .collect()
}

/// A subtask's own clone of a factory's `template` (`what` names it in the error).
fn instance<T: Clone>(template: &Mutex<T>, what: &str) -> Result<T, String> {
    template
        .lock()
        .map(|t| t.clone())
        .map_err(|_| format!("{what} template poisoned"))
}

/// The factory of a source node; each subtask gets its own clone of `source`.
pub fn source_factory<T, S>(source: S) -> NodeFactory
where
    T: Clone + Send + 'static,
    S: SourceFunction<T> + Clone + Send,
{
    // The template is only cloned at deployment; the mutex makes it shareable without asking
    // user types to be `Sync`.
    let template = Mutex::new(source);
    Arc::new(move |_inputs, outputs, rt: TaskRuntime| {
        let out = Output::new(writers::<T>(outputs)?, rt.batch_size);
        let source = instance(&template, "source")?;
        Ok(Box::new(move || run_source(source, out, rt)) as SubtaskBody)
    })
}

/// The factory of a source node whose subtasks generate watermarks with `strategy`.
pub fn source_factory_with_watermarks<T, S, G>(
    source: S,
    strategy: WatermarkStrategy<G>,
) -> NodeFactory
where
    T: Clone + Send + 'static,
    S: SourceFunction<T> + Clone + Send,
    G: WatermarkGenerator<T>,
{
    // Shared only to be cloned at deployment; the mutex spares user types a `Sync` bound.
    let template = Arc::new(Mutex::new((source, strategy)));
    Arc::new(move |_inputs, outputs, rt: TaskRuntime| {
        let out = Output::new(writers::<T>(outputs)?, rt.batch_size);
        let (source, strategy) = instance(&template, "source")?;
        let driver = SourceWatermarkDriver::new(strategy).aligned(&rt.alignment);
        Ok(Box::new(move || run_source_with_watermarks(source, driver, out, rt)) as SubtaskBody)
    })
}

/// The factory of a one-input node; each subtask gets its own clone of `operator`.
pub fn one_input_factory<I, O, Op>(operator: Op) -> NodeFactory
where
    I: Send + 'static,
    O: Clone + Send + 'static,
    Op: OneInputOperator<I, O> + Clone,
{
    let template = Mutex::new(operator);
    Arc::new(move |inputs, outputs, mut rt: TaskRuntime| {
        let inputs = receivers::<I>(inputs)?;
        let codec = inputs.first().map(|c| c.codec);
        let backlogs: Vec<Option<crate::channel::Backlog>> =
            inputs.iter().map(|c| c.backlog.clone()).collect();
        let (channels, credits) = inputs.into_iter().map(|c| (c.receiver, c.credit)).unzip();
        let mut gate =
            InputGate::new(channels, rt.control.clone(), rt.mode).with_credit_returns(credits);
        let restored = rt.restored.channels.take();
        match codec {
            Some(codec) => {
                gate = gate.with_channel_state(codec, restored.as_deref())?;
                gate = gate.with_backlogs(backlogs);
            }
            None if restored.is_some() => {
                return Err("in-flight data of an unaligned checkpoint cannot be restored into a subtask without input channels".into())
            }
            None => {}
        }
        let out = Output::new(writers::<O>(outputs)?, rt.batch_size);
        let op = instance(&template, "operator")?;
        Ok(Box::new(move || run_one_input(op, gate, out, rt)) as SubtaskBody)
    })
}

/// How a one-input node's subtask runs chained behind its producer; each gets its own clone
/// of `operator`.
pub fn one_input_chain_factory<I, O, Op>(operator: Op) -> ChainFactory
where
    I: Data,
    O: Clone + Send + 'static,
    Op: OneInputOperator<I, O> + Clone,
{
    let template = Mutex::new(operator);
    Arc::new(move |outputs, mut rt: TaskRuntime| {
        // Its input channel's part of an unaligned checkpoint taken while it was not chained.
        let replay = match rt.restored.channels.take() {
            None => Vec::new(),
            Some(bytes) => ChannelStateCodec::<I>::new()
                .restore(&bytes, 1)?
                .pop()
                .unwrap_or_default(),
        };
        let out = Output::new(writers::<O>(outputs)?, rt.batch_size);
        let op = instance(&template, "operator")?;
        let (sink, link) = crate::chained::chained::<I, O, Op>(op, out, rt, replay);
        Ok((Box::new(sink) as Erased, link))
    })
}

/// Channels for an edge whose producer emits `T` into a consumer reading `T`.
pub fn direct_channels<T: Data>() -> ChannelFactory {
    ChannelFactory {
        local: Arc::new(|capacity| {
            let (sink, rx, backlog) = channel::direct::<T>(capacity);
            (
                Box::new(sink) as Erased,
                Box::new(InputChannel::local(rx, backlog)) as Erased,
            )
        }),
        remote_out: Arc::new(|writer| Box::new(remote_sink::<T>(writer)) as Erased),
        remote_in: Arc::new(|capacity| remote_input::<T, T>(capacity, crate::remote::same)),
    }
}

/// Channels into the left input of a two-input consumer of `Either<A, B>`.
pub fn left_channels<A: Data, B: Data>() -> ChannelFactory {
    ChannelFactory {
        local: Arc::new(|capacity| {
            let (sink, rx, backlog) = channel::left::<A, B>(capacity);
            (
                Box::new(sink) as Erased,
                Box::new(InputChannel::local(rx, backlog)) as Erased,
            )
        }),
        remote_out: Arc::new(|writer| Box::new(remote_sink::<A>(writer)) as Erased),
        remote_in: Arc::new(|capacity| {
            remote_input::<A, Either<A, B>>(capacity, crate::remote::left)
        }),
    }
}

/// Channels into the right input of a two-input consumer of `Either<A, B>`.
pub fn right_channels<A: Data, B: Data>() -> ChannelFactory {
    ChannelFactory {
        local: Arc::new(|capacity| {
            let (sink, rx, backlog) = channel::right::<A, B>(capacity);
            (
                Box::new(sink) as Erased,
                Box::new(InputChannel::local(rx, backlog)) as Erased,
            )
        }),
        remote_out: Arc::new(|writer| Box::new(remote_sink::<B>(writer)) as Erased),
        remote_in: Arc::new(|capacity| {
            remote_input::<B, Either<A, B>>(capacity, crate::remote::right)
        }),
    }
}

fn remote_input<T: Data, U: Data>(
    capacity: usize,
    wrap: impl Fn(T) -> U + Send + 'static,
) -> (FrameDecoder, RemoteInput) {
    let (rx, decoder) = remote_receiver::<T, U>(capacity, wrap);
    let complete = move |credit: CreditReturn| Box::new(InputChannel::remote(rx, credit)) as Erased;
    (decoder, Box::new(complete))
}

fn sinks<T: 'static>(channels: Vec<Erased>) -> Vec<Box<dyn ChannelSink<T>>> {
    channels
        .into_iter()
        .map(|c| {
            *c.downcast::<Box<dyn ChannelSink<T>>>()
                .expect("channel of the edge's type")
        })
        .collect()
}

/// Writers for an edge without a key: forward, rebalance or broadcast.
pub fn plain_writers<T: Clone + Send + 'static>() -> WriterFactory {
    Arc::new(
        |partition, channels, index, _max_parallelism, _batch_size| {
            let channels = sinks::<T>(channels);
            let writer: Box<dyn EdgeWriter<T>> = match partition {
                Partition::Broadcast => Box::new(BroadcastWriter::new(channels)),
                _ => Box::new(RoundRobinWriter::new(channels, index)),
            };
            Box::new(writer) as Erased
        },
    )
}

/// Writers for a keyed edge: hash partitioning by the key's key group.
pub fn keyed_writers<T, K, F>(key: F) -> WriterFactory
where
    T: Send + 'static,
    K: StableHash + 'static,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    Arc::new(
        move |_partition, channels, _index, max_parallelism, batch_size| {
            let writer: Box<dyn EdgeWriter<T>> = Box::new(HashWriter::new(
                sinks::<T>(channels),
                key.clone(),
                max_parallelism,
                batch_size,
            ));
            Box::new(writer) as Erased
        },
    )
}
