//! The command line's structure: the subcommands of `weir`, each with the flags of the module
//! that runs it.

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::checkpoints::CheckpointsCommand;
use crate::demo::DemoArgs;
use crate::kafka_wordcount::KafkaWordcountArgs;
use crate::pg_replicate::PgReplicateArgs;
use crate::spend_windows::SpendWindowsArgs;
use crate::wordcount::WordcountArgs;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "Weir: stateful stream processing with exactly-once checkpoints"
)]
pub struct Cli {
    /// Log more (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            // A job run logs its restarts; the demo keeps its terminal for the progress line.
            0 if matches!(
                self.command,
                Command::Run(_) | Command::Jobmanager(_) | Command::Taskmanager(_)
            ) =>
            {
                "info"
            }
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the demo job: generated purchases → running spend per user → file sink, with
    /// checkpoints every second.
    Demo(DemoArgs),
    /// Run a built-in job.
    #[command(subcommand)]
    Run(RunCommand),
    /// Measure throughput of the demo pipeline.
    Bench(BenchArgs),
    /// Look at a job's checkpoints.
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// List the jobs a REST API serves (like `flink list`).
    Jobs(crate::jobs::ClientArgs),
    /// Take a checkpoint of a running job now, through its REST API.
    Checkpoint(crate::jobs::JobCommandArgs),
    /// Take a savepoint of a running job, through its REST API.
    Savepoint(crate::jobs::SavepointArgs),
    /// Stop a running job with a final savepoint, through its REST API.
    Stop(crate::jobs::StopArgs),
    /// Cancel a running job (no final checkpoint), through its REST API.
    Cancel(crate::jobs::JobCommandArgs),
    /// Run a job on a cluster: this process coordinates, task managers run the subtasks
    /// (`weir jobmanager -- run wordcount …`).
    Jobmanager(crate::cluster::JobManagerArgs),
    /// Offer slots for a job manager's job: run the subtasks it places here.
    Taskmanager(crate::cluster::TaskManagerArgs),
}

#[derive(Subcommand, Debug)]
pub enum RunCommand {
    /// Count words exactly once: every occurrence of a word becomes a line `word<TAB>count`
    /// (its count so far) in committed files of the output directory.
    Wordcount(WordcountArgs),
    /// Sum each user's spend per tumbling event-time window of generated purchases, exactly
    /// once: a line `user<TAB>window start<TAB>spend<TAB>purchases` per window, in committed
    /// files of the output directory.
    SpendWindows(SpendWindowsArgs),
    /// Replicate a PostgreSQL orders table into running totals per customer, exactly once:
    /// reads the table's snapshot and changes (logical replication) and upserts each
    /// customer's total and order count into a table of another database.
    PgReplicate(Box<PgReplicateArgs>),
    /// Count the words of a Kafka topic exactly once: every occurrence of a word becomes a
    /// record `word<TAB>count` (its count so far), keyed by the word, in another topic, written
    /// in one Kafka transaction per subtask and checkpoint.
    KafkaWordcount(Box<KafkaWordcountArgs>),
}
