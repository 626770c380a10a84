//! The stream environment: the job under construction and its settings. The streams it starts
//! (`StreamEnv::source`) are made in the `stream` module, which builds on it.

use std::cell::RefCell;
use std::rc::Rc;
use weir_core::config::{Config, ConfigError};
use weir_runtime::graph::{Edge, JobGraph, Node, NodeFactory, NodeRole};
use weir_runtime::JobError;

pub(crate) struct Builder {
    pub name: String,
    pub default_parallelism: u32,
    pub max_parallelism: u32,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub errors: Vec<String>,
    /// Operators with a side output: node → (tag id, type of the side records).
    pub side_outputs: std::collections::HashMap<usize, (String, std::any::TypeId)>,
    /// `pipeline.operator-chaining.enabled`.
    pub operator_chaining: bool,
}

/// The job being written: its name, default parallelism, and graph.
#[derive(Clone)]
pub struct StreamEnv {
    pub(crate) inner: Rc<RefCell<Builder>>,
}

impl StreamEnv {
    /// A job named `name` with parallelism 1 and 128 key groups.
    pub fn new(name: &str) -> StreamEnv {
        StreamEnv {
            inner: Rc::new(RefCell::new(Builder {
                name: name.to_string(),
                default_parallelism: 1,
                max_parallelism: weir_state::DEFAULT_MAX_PARALLELISM,
                nodes: Vec::new(),
                edges: Vec::new(),
                errors: Vec::new(),
                side_outputs: std::collections::HashMap::new(),
                operator_chaining: true,
            })),
        }
    }

    /// A job that takes `parallelism.default`, `pipeline.max-parallelism` and
    /// `pipeline.operator-chaining.enabled` from `config`.
    pub fn with_config(name: &str, config: &Config) -> Result<StreamEnv, ConfigError> {
        let env = StreamEnv::new(name);
        if let Some(p) = config.get_u32("parallelism.default")? {
            env.set_parallelism(p);
        }
        if let Some(mp) = config.get_u32("pipeline.max-parallelism")? {
            env.set_max_parallelism(mp);
        }
        if let Some(chaining) = config.get_bool("pipeline.operator-chaining.enabled")? {
            env.set_operator_chaining(chaining);
        }
        Ok(env)
    }

    /// The parallelism of operators that do not set their own.
    pub fn set_parallelism(&self, parallelism: u32) -> &Self {
        self.inner.borrow_mut().default_parallelism = parallelism;
        self
    }

    /// The number of key groups: the upper bound of any keyed operator's parallelism, fixed for
    /// the life of the job's state.
    pub fn set_max_parallelism(&self, max_parallelism: u32) -> &Self {
        self.inner.borrow_mut().max_parallelism = max_parallelism;
        self
    }

    /// Whether operators connected by a forward edge at equal parallelism share one task loop
    /// (on by default): the consumer is called directly with each batch instead of through a
    /// channel and a thread of its own. Each operator keeps its own state, snapshots and
    /// metrics either way. `DataStream::disable_chaining` and `start_new_chain` set it per
    /// operator.
    ///
    /// ```
    /// use weir_api::prelude::*;
    ///
    /// let env = StreamEnv::new("chains");
    /// env.set_parallelism(2);
    /// env.source("numbers", VecSource::new(vec![1u64, 2, 3]))
    ///     .map("double", |n: u64| n * 2) // chained behind the source
    ///     .key_by(|n: &u64| *n)
    ///     .count("counts") // a hash edge: a task loop of its own
    ///     .sink("out", CollectSink::default()) // chained behind the counts
    ///     .disable_chaining(); // ... unless it asks otherwise
    /// assert_eq!(env.build()?.chained_edges(), [true, false, false]);
    ///
    /// env.set_operator_chaining(false);
    /// assert_eq!(env.build()?.chained_edges(), [false, false, false]);
    /// # Ok::<(), weir_runtime::JobError>(())
    /// ```
    pub fn set_operator_chaining(&self, enabled: bool) -> &Self {
        self.inner.borrow_mut().operator_chaining = enabled;
        self
    }

    pub(crate) fn add_node(
        &self,
        name: &str,
        role: NodeRole,
        keyed: bool,
        factory: NodeFactory,
    ) -> usize {
        let mut b = self.inner.borrow_mut();
        let parallelism = b.default_parallelism;
        b.nodes.push(Node {
            uid: name.to_string(),
            name: name.to_string(),
            parallelism,
            role,
            keyed,
            factory,
            chain: None,
            chaining: Default::default(),
        });
        b.nodes.len() - 1
    }

    /// Finishes the job: checks it and returns its graph.
    pub fn build(&self) -> Result<JobGraph, JobError> {
        let b = self.inner.borrow();
        if let Some(e) = b.errors.first() {
            return Err(JobError::InvalidJob(e.clone()));
        }
        if b.nodes.is_empty() {
            return Err(JobError::InvalidJob(format!(
                "job '{}' has no operators",
                b.name
            )));
        }
        if b.max_parallelism == 0 || b.max_parallelism > 32768 {
            return Err(JobError::InvalidJob(format!(
                "pipeline.max-parallelism is {}; it must be between 1 and 32768",
                b.max_parallelism
            )));
        }
        let graph = JobGraph {
            name: b.name.clone(),
            max_parallelism: b.max_parallelism,
            nodes: b.nodes.clone(),
            edges: b.edges.clone(),
            operator_chaining: b.operator_chaining,
        };
        graph.validate()?;
        Ok(graph)
    }
}
