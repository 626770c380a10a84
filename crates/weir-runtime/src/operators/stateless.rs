//! Map, filter and flat-map: one closure call per record inside a batch loop.

use crate::error::TaskError;
use crate::operator::OneInputOperator;
use crate::output::Output;

#[derive(Clone)]
pub struct MapOperator<F>(pub F);

impl<I, O, F> OneInputOperator<I, O> for MapOperator<F>
where
    I: Send + 'static,
    O: Clone + Send + 'static,
    F: FnMut(I) -> O + Send + 'static,
{
    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError> {
        out.emit_batch(batch.into_iter().map(&mut self.0).collect());
        Ok(())
    }
}

#[derive(Clone)]
pub struct FilterOperator<F>(pub F);

impl<T, F> OneInputOperator<T, T> for FilterOperator<F>
where
    T: Clone + Send + 'static,
    F: FnMut(&T) -> bool + Send + 'static,
{
    fn process_batch(&mut self, mut batch: Vec<T>, out: &mut Output<T>) -> Result<(), TaskError> {
        batch.retain(|r| (self.0)(r));
        out.emit_batch(batch);
        Ok(())
    }
}

#[derive(Clone)]
pub struct FlatMapOperator<F>(pub F);

impl<I, O, F, It> OneInputOperator<I, O> for FlatMapOperator<F>
where
    I: Send + 'static,
    O: Clone + Send + 'static,
    It: IntoIterator<Item = O>,
    F: FnMut(I) -> It + Send + 'static,
{
    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError> {
        for record in batch {
            for o in (self.0)(record) {
                out.emit(o);
            }
        }
        Ok(())
    }
}
