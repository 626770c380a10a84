//! Streams: the typed handles a job is written with. Each operator method adds a node to the
//! graph and an edge from the stream's node(s) to it.

use std::marker::PhantomData;
use weir_core::Data;
use weir_runtime::channel::Either;
use weir_runtime::graph::{
    direct_channels, keyed_writers, left_channels, one_input_chain_factory, one_input_factory,
    plain_writers, right_channels, Chaining, ChannelFactory, Edge, NodeRole, WriterFactory,
};
use weir_runtime::operator::SourceFunction;
use weir_runtime::operators::{
    CoProcessFunction, CoProcessOperator, FilterOperator, FlatMapOperator, KeyedCoProcessFunction,
    KeyedCoProcessOperator, KeyedProcessFunction, KeyedProcessOperator, MapOperator, SinkFunction,
    SinkOperator,
};
use weir_runtime::partition::Partition;
use weir_state::{Key, Value};

use crate::aggregate::{Count, Reduce, Sum};
use crate::env::StreamEnv;

impl StreamEnv {
    /// Adds a parallel source. `name` is also its uid unless `.uid()` says otherwise.
    pub fn source<T, S>(&self, name: &str, source: S) -> DataStream<T>
    where
        T: Data,
        S: SourceFunction<T> + Clone + Send,
    {
        let node = self.add_node(
            name,
            NodeRole::Source,
            false,
            weir_runtime::graph::source_factory(source),
        );
        DataStream::new(self.clone(), vec![node])
    }
}

/// Turns the writers of an edge for this stream's records into writers for what its node
/// really emits (the main or side half of an operator with a side output).
pub(crate) type WriterAdapter = fn(WriterFactory) -> WriterFactory;

/// A stream of `T` records: the output of one operator (or of several, after `union`).
pub struct DataStream<T> {
    pub(crate) env: StreamEnv,
    pub(crate) nodes: Vec<usize>,
    /// Per node in `nodes`: how its output becomes this stream (`None`: it emits `T`).
    pub(crate) adapters: Vec<Option<WriterAdapter>>,
    pub(crate) partition: Partition,
    _t: PhantomData<fn() -> T>,
}

/// A clone is the same stream: each operator applied to a clone reads every record of it.
impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            env: self.env.clone(),
            nodes: self.nodes.clone(),
            adapters: self.adapters.clone(),
            partition: self.partition,
            _t: PhantomData,
        }
    }
}

impl<T: Data> DataStream<T> {
    pub(crate) fn new(env: StreamEnv, nodes: Vec<usize>) -> DataStream<T> {
        let adapters = vec![None; nodes.len()];
        DataStream {
            env,
            nodes,
            adapters,
            partition: Partition::Default,
            _t: PhantomData,
        }
    }

    /// A stream of one half of `node`'s output.
    pub(crate) fn adapted(env: StreamEnv, node: usize, adapter: WriterAdapter) -> DataStream<T> {
        DataStream {
            env,
            nodes: vec![node],
            adapters: vec![Some(adapter)],
            partition: Partition::Default,
            _t: PhantomData,
        }
    }

    pub(crate) fn last_node(&self, what: &str) -> Option<usize> {
        match self.nodes.as_slice() {
            [one] => Some(*one),
            _ => {
                self.env.inner.borrow_mut().errors.push(format!(
                    "{what} applies to one operator, not to a union of streams"
                ));
                None
            }
        }
    }

    /// Sets the stable uid of the operator that produced this stream (state is matched to
    /// operators by uid on restore). Defaults to the operator's name.
    pub fn uid(self, uid: &str) -> Self {
        if let Some(n) = self.last_node("uid()") {
            self.env.inner.borrow_mut().nodes[n].uid = uid.to_string();
        }
        self
    }

    /// Sets the parallelism of the operator that produced this stream.
    pub fn parallelism(self, parallelism: u32) -> Self {
        if let Some(n) = self.last_node("parallelism()") {
            self.env.inner.borrow_mut().nodes[n].parallelism = parallelism;
        }
        self
    }

    /// Runs the operator that produced this stream in a task loop of its own: never chained
    /// behind its producer, nor its consumers behind it (Flink's `disableChaining`).
    pub fn disable_chaining(self) -> Self {
        self.set_chaining("disable_chaining()", Chaining::Never)
    }

    /// Starts a new chain at the operator that produced this stream: it is not chained behind
    /// its producer, but its consumers may be chained behind it (Flink's `startNewChain`).
    pub fn start_new_chain(self) -> Self {
        self.set_chaining("start_new_chain()", Chaining::Head)
    }

    fn set_chaining(self, what: &str, chaining: Chaining) -> Self {
        if let Some(n) = self.last_node(what) {
            self.env.inner.borrow_mut().nodes[n].chaining = chaining;
        }
        self
    }

    /// The next operator reads this stream round-robin from all producers.
    pub fn rebalance(mut self) -> Self {
        self.partition = Partition::Rebalance;
        self
    }

    /// The next operator's subtask `i` reads only this stream's subtask `i`.
    pub fn forward(mut self) -> Self {
        self.partition = Partition::Forward;
        self
    }

    /// Every subtask of the next operator receives every record.
    pub fn broadcast(mut self) -> Self {
        self.partition = Partition::Broadcast;
        self
    }

    /// Connects this stream into node `to`.
    pub(crate) fn connect_into(
        &self,
        to: usize,
        channel: ChannelFactory,
        writer: WriterFactory,
        partition: Partition,
    ) {
        let mut b = self.env.inner.borrow_mut();
        for (&from, adapter) in self.nodes.iter().zip(&self.adapters) {
            let writer = match adapter {
                Some(adapt) => adapt(writer.clone()),
                None => writer.clone(),
            };
            b.edges.push(Edge {
                from,
                to,
                partition,
                channel: channel.clone(),
                writer,
            });
        }
    }

    pub(crate) fn then<O, Op>(
        self,
        name: &str,
        role: NodeRole,
        keyed: bool,
        op: Op,
    ) -> DataStream<O>
    where
        O: Data,
        Op: weir_runtime::OneInputOperator<T, O> + Clone,
    {
        let node = self
            .env
            .add_node(name, role, keyed, one_input_factory::<T, O, Op>(op.clone()));
        self.env.inner.borrow_mut().nodes[node].chain =
            Some(one_input_chain_factory::<T, O, Op>(op));
        self.connect_into(
            node,
            direct_channels::<T>(),
            plain_writers::<T>(),
            self.partition,
        );
        DataStream::new(self.env.clone(), vec![node])
    }

    /// Transforms every record.
    pub fn map<U, F>(self, name: &str, f: F) -> DataStream<U>
    where
        U: Data,
        F: FnMut(T) -> U + Clone + Send + Sync + 'static,
    {
        self.then(name, NodeRole::Operator, false, MapOperator(f))
    }

    /// Keeps the records for which `f` is true.
    pub fn filter<F>(self, name: &str, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + Sync + 'static,
    {
        self.then(name, NodeRole::Operator, false, FilterOperator(f))
    }

    /// Turns every record into zero or more records.
    pub fn flat_map<U, It, F>(self, name: &str, f: F) -> DataStream<U>
    where
        U: Data,
        It: IntoIterator<Item = U> + 'static,
        F: FnMut(T) -> It + Clone + Send + Sync + 'static,
    {
        self.then(name, NodeRole::Operator, false, FlatMapOperator(f))
    }

    /// Partitions the stream by key: records with equal keys go to the same subtask, through
    /// the key's key group.
    pub fn key_by<K, KF>(self, key: KF) -> KeyedStream<T, K, KF>
    where
        K: Key,
        KF: Fn(&T) -> K + Clone + Send + Sync + 'static,
    {
        KeyedStream {
            stream: self,
            key,
            _k: PhantomData,
        }
    }

    /// Merges streams of the same type; the next operator reads from all of them.
    pub fn union(mut self, other: DataStream<T>) -> DataStream<T> {
        self.nodes.extend(other.nodes);
        self.adapters.extend(other.adapters);
        self
    }

    /// Joins two streams into one two-input operator.
    pub fn connect<U: Data>(self, other: DataStream<U>) -> ConnectedStreams<T, U> {
        ConnectedStreams {
            left: self,
            right: other,
        }
    }

    /// Writes the stream out.
    pub fn sink<S>(self, name: &str, sink: S) -> SinkHandle
    where
        S: SinkFunction<T> + Clone,
    {
        let stream = self.then(name, NodeRole::Sink, false, SinkOperator(sink));
        SinkHandle { stream }
    }
}

/// The end of a stream; sets the sink's uid and parallelism.
pub struct SinkHandle {
    stream: DataStream<()>,
}

impl SinkHandle {
    pub fn uid(self, uid: &str) -> Self {
        SinkHandle {
            stream: self.stream.uid(uid),
        }
    }
    pub fn parallelism(self, parallelism: u32) -> Self {
        SinkHandle {
            stream: self.stream.parallelism(parallelism),
        }
    }
    /// Runs the sink in a task loop of its own, never chained behind its producer.
    pub fn disable_chaining(self) -> Self {
        SinkHandle {
            stream: self.stream.disable_chaining(),
        }
    }
}

/// A stream partitioned by key; its operators keep keyed state.
pub struct KeyedStream<T, K, KF> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key: KF,
    _k: PhantomData<fn() -> K>,
}

impl<T, K, KF> KeyedStream<T, K, KF>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    /// Runs a keyed process function with keyed state.
    pub fn process<O, F>(self, name: &str, function: F) -> DataStream<O>
    where
        O: Data,
        F: KeyedProcessFunction<K, T, O>,
    {
        let op = KeyedProcessOperator::new(function, self.key.clone());
        let env = self.stream.env.clone();
        let node = env.add_node(
            name,
            NodeRole::Operator,
            true,
            one_input_factory::<T, O, _>(op),
        );
        self.stream.connect_into(
            node,
            direct_channels::<T>(),
            keyed_writers::<T, K, KF>(self.key),
            Partition::Hash,
        );
        DataStream::new(env, vec![node])
    }

    /// A running reduction per key: emits the new accumulated value for every record.
    pub fn reduce<F>(self, name: &str, f: F) -> DataStream<T>
    where
        T: Value,
        F: Fn(&T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.process(name, Reduce::new(f))
    }

    /// A running sum per key of `value(record)`: emits `(key, sum)` for every record.
    pub fn sum<S, F>(self, name: &str, value: F) -> DataStream<(K, S)>
    where
        S: Value + Copy + Default + std::ops::Add<Output = S>,
        F: Fn(&T) -> S + Clone + Send + Sync + 'static,
    {
        self.process(name, Sum::new(value))
    }

    /// A running count per key: emits `(key, count)` for every record.
    pub fn count(self, name: &str) -> DataStream<(K, u64)> {
        self.process(name, Count)
    }

    /// Connects two streams keyed by the same key type into one keyed two-input operator.
    pub fn connect<U, KF2>(
        self,
        other: KeyedStream<U, K, KF2>,
    ) -> KeyedConnectedStreams<T, U, K, KF, KF2>
    where
        U: Data,
        KF2: Fn(&U) -> K + Clone + Send + Sync + 'static,
    {
        KeyedConnectedStreams {
            left: self,
            right: other,
        }
    }
}

/// Two streams feeding one two-input operator.
pub struct ConnectedStreams<A, B> {
    left: DataStream<A>,
    right: DataStream<B>,
}

impl<A: Data, B: Data> ConnectedStreams<A, B> {
    pub fn process<O, F>(self, name: &str, function: F) -> DataStream<O>
    where
        O: Data,
        F: CoProcessFunction<A, B, O>,
    {
        let env = self.left.env.clone();
        let factory = one_input_factory::<Either<A, B>, O, _>(CoProcessOperator(function));
        let node = env.add_node(name, NodeRole::Operator, false, factory);
        self.left.connect_into(
            node,
            left_channels::<A, B>(),
            plain_writers::<A>(),
            self.left.partition,
        );
        self.right.connect_into(
            node,
            right_channels::<A, B>(),
            plain_writers::<B>(),
            self.right.partition,
        );
        DataStream::new(env, vec![node])
    }
}

/// Two keyed streams feeding one keyed two-input operator with shared keyed state.
pub struct KeyedConnectedStreams<A, B, K, KA, KB> {
    left: KeyedStream<A, K, KA>,
    right: KeyedStream<B, K, KB>,
}

impl<A, B, K, KA, KB> KeyedConnectedStreams<A, B, K, KA, KB>
where
    A: Data,
    B: Data,
    K: Key,
    KA: Fn(&A) -> K + Clone + Send + Sync + 'static,
    KB: Fn(&B) -> K + Clone + Send + Sync + 'static,
{
    pub fn process<O, F>(self, name: &str, function: F) -> DataStream<O>
    where
        O: Data,
        F: KeyedCoProcessFunction<K, A, B, O>,
    {
        let env = self.left.stream.env.clone();
        let op =
            KeyedCoProcessOperator::new(function, self.left.key.clone(), self.right.key.clone());
        let factory = one_input_factory::<Either<A, B>, O, _>(op);
        let node = env.add_node(name, NodeRole::Operator, true, factory);
        self.left.stream.connect_into(
            node,
            left_channels::<A, B>(),
            keyed_writers::<A, K, KA>(self.left.key),
            Partition::Hash,
        );
        self.right.stream.connect_into(
            node,
            right_channels::<A, B>(),
            keyed_writers::<B, K, KB>(self.right.key),
            Partition::Hash,
        );
        DataStream::new(env, vec![node])
    }
}
