//! End-to-end tests of the `weir` binary: real processes, real files, real SIGKILLs.

mod bad_input;
mod bench;
mod chaos;
mod cluster;
mod common;
mod demo;
mod kafka_wordcount;
mod kill_and_resume;
mod local_recovery;
mod netns;
mod partitions;
mod pg_replicate;
mod restore_matrix;
mod soak;
mod sources_ending;
