//! Running the writes of one step: [`PARALLEL_WRITES`] at a time, each [`retried`] on
//! transient errors, every write attempted.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, stream};
use tracing::warn;

use crate::controller::api::client::PARALLEL_WRITES;
use crate::controller::api::retry::retried;
use crate::controller::error::Error;

/// Like [`each`], but a write that fails for good (after [`retried`]) is returned with the
/// object `what` names instead of ending the step: one refused object must not freeze the
/// whole Skyhook.
pub(super) async fn recorded<'a, T: Sync + 'a>(
    items: &'a [T],
    write: impl Fn(&'a T) -> BoxFuture<'a, Result<(), Error>> + Copy + Send + 'a,
    what: fn(&T) -> String,
) -> Vec<(String, Error)> {
    // Boxed and collected first, as in [`all`]: the reconcile future must stay `Send`.
    let writes: Vec<BoxFuture<'a, Result<(), Error>>> = items
        .iter()
        .map(|item| retried(move || write(item)).boxed())
        .collect();
    let results: Vec<Result<(), Error>> = stream::iter(writes)
        .buffered(PARALLEL_WRITES)
        .collect()
        .await;
    items
        .iter()
        .zip(results)
        .filter_map(|(item, r)| r.err().map(|e| (what(item), e)))
        .collect()
}

/// Writes each item ([`retried`]) through [`all`].
pub(super) async fn each<'a, T: Sync + 'a>(
    items: impl IntoIterator<Item = &'a T>,
    write: impl Fn(&'a T) -> BoxFuture<'a, Result<(), Error>> + Copy + Send + 'a,
) -> Result<(), Error> {
    all(items
        .into_iter()
        .map(|item| retried(move || write(item)).boxed())
        .collect())
    .await
}

/// Runs the writes of one step, [`PARALLEL_WRITES`] at a time, attempting all of them; the
/// first error is returned after the others finished. (Boxed: the reconcile future must stay
/// `Send` for every lifetime, which generic closures over borrowed items defeat.)
pub(super) async fn all(writes: Vec<BoxFuture<'_, Result<(), Error>>>) -> Result<(), Error> {
    let count = writes.len();
    let results: Vec<Result<(), Error>> = stream::iter(writes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect()
        .await;
    let failed = results.iter().filter(|r| r.is_err()).count();
    match results.into_iter().find_map(Result::err) {
        Some(e) => {
            warn!(failed, of = count, error = %e, "writes failed; the next pass redoes them");
            Err(e)
        }
        None => Ok(()),
    }
}
