//! A sink that collects records in memory, shared between its subtasks — for tests and
//! examples, where the job's output is checked after it ends.

use std::sync::{Arc, Mutex};
use weir_runtime::operators::SinkFunction;
use weir_runtime::TaskError;

/// Collects every record into a shared vector (one lock per batch, not per record).
#[derive(Clone)]
pub struct CollectSink<T> {
    records: Arc<Mutex<Vec<T>>>,
}

impl<T> Default for CollectSink<T> {
    fn default() -> Self {
        CollectSink {
            records: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<T> CollectSink<T> {
    /// What was collected so far.
    pub fn records(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl<T: Send + 'static> SinkFunction<T> for CollectSink<T> {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        self.records
            .lock()
            .map_err(|_| TaskError::user("collect sink poisoned"))?
            .extend(batch);
        Ok(())
    }
}
