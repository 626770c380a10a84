//! What a job that runs by name is to the command line and to a cluster: [`Runnable`] runs it
//! in this process (`weir run wordcount …`), [`ClusterJob`] is the same job on a cluster (the
//! same command after `weir jobmanager --`). The jobs are listed in `registry.rs`.

use weir_core::config::HighAvailabilityConfig;
use weir_core::Config;
use weir_runtime::deploy::Deployer;
use weir_runtime::graph::JobGraph;
use weir_runtime::{ExecutionConfig, HighAvailabilityServices, StopHandle};

use crate::CliError;

/// A job named on the command line, with its flags.
pub trait Runnable {
    /// Runs the job in this process.
    fn run(self: Box<Self>) -> Result<(), CliError>;

    /// The job as a cluster runs it, or why its flags do not suit a cluster. Only jobs the
    /// registry marks as running on a cluster are asked.
    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError>;
}

/// A job as a cluster runs it: every process builds it alike from the job's flags, and the job
/// manager leads it.
pub trait ClusterJob {
    /// The job graph and its execution settings, as every task manager builds them.
    fn build(&self) -> Result<(JobGraph, ExecutionConfig), CliError>;

    /// Whether the job takes options of its own: the job manager's `-D` options are then the
    /// job's too, and go to the task managers with its flags. A job that takes none refuses
    /// every option but the cluster's.
    fn takes_options(&self) -> bool;

    /// Adds the job manager's `-D` options (`KEY=VALUE`, the cluster's secret left out) to the
    /// job's own, for a job that [takes options](ClusterJob::takes_options).
    fn add_options(&mut self, _defines: &[String]) {}

    /// Checks the job's flags on the job manager before it starts (building the job where that
    /// is how they are checked), and tells where the job keeps its checkpoint ids and completed
    /// checkpoints.
    fn prepare(&mut self) -> Result<HighAvailabilityConfig, CliError>;

    /// The command that names the job after `weir`, as messages quote it.
    fn command(&self) -> &'static str;

    /// The job's name, under which a leader is elected with high availability.
    fn job_name(&self) -> &str;

    /// Whether Ctrl-C on the job manager stops the job (through the `stop` given to
    /// [`run_on`](ClusterJob::run_on)).
    fn stops_on_interrupt(&self) -> bool;

    /// Runs the job with its attempts deployed by the job manager's `deployer`, its checkpoint
    /// ids and completed checkpoints kept by `ha` (ZooKeeper) or in this process; `stop` stops
    /// or cancels it.
    fn run_on(
        &self,
        deployer: &mut dyn Deployer,
        ha: Option<&mut dyn HighAvailabilityServices>,
        stop: &StopHandle,
    ) -> Result<(), CliError>;
}

/// A job built from its flags alike in every process, that takes the job manager's options as
/// its own (`wordcount`, `spend-windows`): [`OnCluster`] makes it a [`ClusterJob`].
pub trait BuildsAlike: Sized {
    /// The job as built: its graph, settings and whatever its run needs besides.
    type Built;
    /// The command that names the job after `weir`.
    const COMMAND: &'static str;
    /// The job's `-D` options, to which the job manager's are added.
    fn defines(&mut self) -> &mut Vec<String>;
    /// Builds the job from its flags (`cluster`: as part of a cluster, which allows high
    /// availability).
    fn build(&self, cluster: bool) -> Result<Self::Built, CliError>;
    /// The graph, settings and options of a built job.
    fn parts(built: &Self::Built) -> (&JobGraph, &ExecutionConfig, &Config);
    /// Runs the built job with its attempts deployed by `deployer`.
    fn run_built(
        &self,
        built: &Self::Built,
        deployer: &mut dyn Deployer,
        ha: Option<&mut dyn HighAvailabilityServices>,
        stop: &StopHandle,
    ) -> Result<(), CliError>;
}

/// A [`BuildsAlike`] job on a cluster: it takes the job manager's options, and the job manager
/// builds it before it starts, so that bad flags fail before any task manager is involved.
pub struct OnCluster<J: BuildsAlike> {
    args: J,
    /// The job manager's job, once prepared.
    built: Option<J::Built>,
}

impl<J: BuildsAlike> OnCluster<J> {
    pub fn new(args: J) -> OnCluster<J> {
        OnCluster { args, built: None }
    }
}

impl<J: BuildsAlike> ClusterJob for OnCluster<J> {
    fn build(&self) -> Result<(JobGraph, ExecutionConfig), CliError> {
        let built = self.args.build(true)?;
        let (graph, exec, _) = J::parts(&built);
        Ok((graph.clone(), exec.clone()))
    }

    fn takes_options(&self) -> bool {
        true
    }

    fn add_options(&mut self, defines: &[String]) {
        self.args.defines().extend(defines.iter().cloned());
    }

    fn prepare(&mut self) -> Result<HighAvailabilityConfig, CliError> {
        let built = self.args.build(true)?;
        let ha = HighAvailabilityConfig::from_config(J::parts(&built).2)?;
        self.built = Some(built);
        Ok(ha)
    }

    fn command(&self) -> &'static str {
        J::COMMAND
    }

    fn job_name(&self) -> &str {
        self.built
            .as_ref()
            .map_or(J::COMMAND.rsplit(' ').next().unwrap_or(J::COMMAND), |b| {
                &J::parts(b).0.name
            })
    }

    fn stops_on_interrupt(&self) -> bool {
        true
    }

    fn run_on(
        &self,
        deployer: &mut dyn Deployer,
        ha: Option<&mut dyn HighAvailabilityServices>,
        stop: &StopHandle,
    ) -> Result<(), CliError> {
        let built = self
            .built
            .as_ref()
            .expect("the job manager prepares the job first");
        self.args.run_built(built, deployer, ha, stop)
    }
}
