//! Batch strategies (§6.3, §6.4): how big the next batch of a compartment is, and what a
//! finished batch does to its bookkeeping.
//!
//! Every counter here comes from the Skyhook's status, which anyone allowed to patch the status
//! subresource can set to any integer, so the arithmetic saturates: a patched `currentBatch` or
//! `lastBatchSize` near `i64::MAX` must neither panic (debug) nor wrap to a negative (release).
//! Counters the operator grows stop at the CRD's bound ([`MAX_STATUS_COUNT`]), so the status it
//! writes back is never refused by the API server.

use crate::crd::admission::MAX_STATUS_COUNT;
use crate::crd::{BatchState, EffectiveStrategy};

/// `n + 1`, stopping at the CRD's bound.
fn bump(n: i64) -> i64 {
    n.saturating_add(1).clamp(0, MAX_STATUS_COUNT)
}

/// §6.3 with one deviation: with a strategy the ceiling is a hard cap (the reference documents
/// the budget as the most nodes at work at once but lets a strategy exceed it). Without a
/// strategy the ceiling is the size. Always at least 1 for a compartment with nodes.
pub fn batch_size(
    strategy: Option<&EffectiveStrategy>,
    b: &BatchState,
    total: i64,
    ceiling: i64,
) -> i64 {
    if total == 0 {
        return 0;
    }
    let Some(s) = strategy else {
        return ceiling.max(1);
    };
    let done = checkpoint(b);
    let remaining = total.saturating_sub(done);
    let progress = percent(done, total);
    let slow_down = b.last_batch_failed && progress < s.params().safety_limit;
    let last = b.last_batch_size;
    let size = match *s {
        EffectiveStrategy::Fixed(p) => p.initial_batch,
        EffectiveStrategy::Linear { params, delta } => match last {
            0 => params.initial_batch,
            _ if slow_down => last.saturating_sub(delta).max(1),
            _ => last.saturating_add(delta),
        },
        EffectiveStrategy::Exponential {
            params,
            growth_factor,
        } => match last {
            0 => params.initial_batch,
            _ if growth_factor <= 0 => params.initial_batch,
            _ if slow_down => (last / growth_factor).max(1),
            _ => last.saturating_mul(growth_factor).min(total),
        },
    };
    size.min(remaining).max(1).min(ceiling.max(1))
}

/// Counts of a compartment's nodes when no node in it is at work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub complete: i64,
    pub erroring: i64,
    pub total: i64,
}

/// §6.4 evaluation of a finished batch. Returns whether the state changed.
pub fn evaluate(strategy: Option<&EffectiveStrategy>, b: &mut BatchState, f: Finished) -> bool {
    // Only a hand-patched status holds counters outside the CRD's bounds (objects stored before
    // the bounds existed): bring them back inside, so the status written back is accepted.
    let before = b.clone();
    for counter in [
        &mut b.consecutive_failures,
        &mut b.completed_nodes,
        &mut b.failed_nodes,
        &mut b.last_batch_size,
        &mut b.current_batch,
    ] {
        *counter = (*counter).clamp(0, MAX_STATUS_COUNT);
    }
    let patched = *b != before;
    if b.current_batch <= 0 {
        b.current_batch = 1;
        return true;
    }
    let dc = f.complete.saturating_sub(b.completed_nodes);
    let df = f.erroring.saturating_sub(b.failed_nodes);
    if dc < 0 || df < 0 {
        // Nodes left the compartment or recovered: start counting again from here.
        b.completed_nodes = f.complete;
        b.failed_nodes = f.erroring;
        return true;
    }
    if dc == 0 && df == 0 {
        return patched;
    }
    b.completed_nodes = f.complete;
    b.failed_nodes = f.erroring;
    let n = dc.saturating_add(df);
    let Some(s) = strategy else {
        b.current_batch = bump(b.current_batch);
        b.last_batch_size = n.min(MAX_STATUS_COUNT);
        return true;
    };
    let p = s.params();
    let success = percent(dc, n);
    let progress = percent(checkpoint(b), f.total);
    let failed = success < p.batch_threshold;
    b.last_batch_size = n.min(MAX_STATUS_COUNT);
    b.last_batch_failed = failed;
    if failed {
        b.consecutive_failures = bump(b.consecutive_failures);
        if p.failure_threshold
            .is_some_and(|t| progress < p.safety_limit && b.consecutive_failures >= t)
        {
            b.should_stop = true;
        }
    } else {
        b.consecutive_failures = 0;
    }
    b.current_batch = bump(b.current_batch);
    true
}

/// A finished batch failed after its evaluation (a node of it went NotReady while it soaked):
/// counted as a failed batch, and the rollout stops if that reaches the failure threshold.
pub fn fail_batch(strategy: Option<&EffectiveStrategy>, b: &mut BatchState, total: i64) {
    b.last_batch_failed = true;
    b.consecutive_failures = bump(b.consecutive_failures);
    let Some(s) = strategy else { return };
    let p = s.params();
    let progress = percent(checkpoint(b), total);
    if p.failure_threshold
        .is_some_and(|t| progress < p.safety_limit && b.consecutive_failures >= t)
    {
        b.should_stop = true;
    }
}

/// Nodes finished at the last evaluation; a negative checkpoint (only a hand-patched status has
/// one) counts as none.
fn checkpoint(b: &BatchState) -> i64 {
    b.completed_nodes
        .max(0)
        .saturating_add(b.failed_nodes.max(0))
}

/// `part` as a whole percentage of `whole`; 0 of nothing.
fn percent(part: i64, whole: i64) -> i64 {
    if whole <= 0 {
        return 0;
    }
    // i128: `part * 100` of a patched counter would overflow i64.
    let p = i128::from(part) * 100 / i128::from(whole);
    i64::try_from(p).unwrap_or(if p < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::StrategyParams;
    use crate::plan::fixtures::{exponential, fixed, linear, params};

    fn state(last: i64, failed: bool, completed: i64, erroring: i64) -> BatchState {
        BatchState {
            current_batch: 2,
            last_batch_size: last,
            last_batch_failed: failed,
            completed_nodes: completed,
            failed_nodes: erroring,
            ..BatchState::default()
        }
    }

    #[test]
    fn batch_size_per_strategy() {
        // (case, strategy, state, total nodes, ceiling, size)
        let cases: Vec<(&str, Option<EffectiveStrategy>, BatchState, i64, i64, i64)> = vec![
            (
                "fixed: initialBatch",
                Some(fixed(3)),
                BatchState::fresh(),
                10,
                10,
                3,
            ),
            (
                "fixed: capped by remaining",
                Some(fixed(3)),
                state(3, false, 8, 0),
                10,
                10,
                2,
            ),
            (
                "fixed: at least 1 when nothing remains",
                Some(fixed(3)),
                state(3, false, 8, 2),
                10,
                10,
                1,
            ),
            (
                "linear: first batch",
                Some(linear(1, 1)),
                BatchState::fresh(),
                8,
                8,
                1,
            ),
            (
                "linear: grows by delta",
                Some(linear(1, 2)),
                state(3, false, 3, 0),
                20,
                20,
                5,
            ),
            (
                "linear: a failed batch below the safety limit shrinks",
                Some(linear(1, 1)),
                state(3, true, 2, 1),
                10,
                10,
                2,
            ),
            (
                "linear: shrinking stops at 1",
                Some(linear(1, 5)),
                state(3, true, 2, 1),
                10,
                10,
                1,
            ),
            (
                "linear: a failed batch past the safety limit still grows",
                Some(linear(1, 1)),
                state(3, true, 5, 1),
                10,
                10,
                4,
            ),
            (
                "exponential: first batch",
                Some(exponential(1, 2)),
                BatchState::fresh(),
                8,
                8,
                1,
            ),
            (
                "exponential: multiplies",
                Some(exponential(1, 2)),
                state(2, false, 3, 0),
                16,
                16,
                4,
            ),
            (
                "exponential: a failed batch divides",
                Some(exponential(1, 2)),
                state(4, true, 3, 1),
                16,
                16,
                2,
            ),
            (
                "exponential: capped by the nodes left",
                Some(exponential(1, 2)),
                state(4, false, 7, 0),
                8,
                8,
                1,
            ),
            (
                "no strategy: the ceiling",
                None,
                BatchState::fresh(),
                10,
                4,
                4,
            ),
            (
                "no strategy, ceiling 0: one node",
                None,
                BatchState::fresh(),
                10,
                0,
                1,
            ),
            (
                "beyond the reference: the ceiling caps a strategy",
                Some(fixed(5)),
                BatchState::fresh(),
                10,
                2,
                2,
            ),
            (
                "beyond the reference: linear growth capped",
                Some(linear(1, 1)),
                state(3, false, 3, 0),
                10,
                3,
                3,
            ),
            (
                "empty compartment",
                Some(fixed(3)),
                BatchState::fresh(),
                0,
                0,
                0,
            ),
        ];
        for (case, s, b, total, ceiling, want) in cases {
            assert_eq!(
                batch_size(s.as_ref(), &b, total, ceiling),
                want,
                "case: {case}"
            );
        }
    }

    /// Batch sizes of a whole rollout in which every node of every batch succeeds.
    fn progression(s: EffectiveStrategy, total: i64, ceiling: i64) -> Vec<i64> {
        let mut b = BatchState::fresh();
        let mut complete = 0;
        let mut sizes = Vec::new();
        while complete < total {
            let size = batch_size(Some(&s), &b, total, ceiling);
            sizes.push(size);
            complete += size;
            let f = Finished {
                complete,
                erroring: 0,
                total,
            };
            assert!(evaluate(Some(&s), &mut b, f));
        }
        assert_eq!(b.current_batch, sizes.len() as i64 + 1);
        sizes
    }

    #[test]
    fn progressions_of_the_acceptance_scenarios() {
        assert_eq!(progression(linear(1, 1), 8, 8), [1, 2, 3, 2]);
        assert_eq!(progression(exponential(1, 2), 8, 8), [1, 2, 4, 1]);
        assert_eq!(progression(fixed(1), 2, 2), [1, 1]);
        assert_eq!(progression(exponential(1, 2), 31, 31), [1, 2, 4, 8, 16]);
        assert_eq!(
            progression(exponential(1, 2), 8, 3),
            [1, 2, 3, 2],
            "ceiling 3 caps it"
        );
    }

    #[test]
    fn evaluation_of_a_finished_batch() {
        let strict = EffectiveStrategy::Fixed(StrategyParams {
            failure_threshold: Some(1),
            ..params(2)
        });
        let lenient = EffectiveStrategy::Fixed(StrategyParams {
            batch_threshold: 50,
            failure_threshold: Some(2),
            ..params(2)
        });
        // (case, strategy, state before, complete, erroring, total, changed, state after)
        let cases: Vec<(
            &str,
            Option<EffectiveStrategy>,
            BatchState,
            i64,
            i64,
            i64,
            bool,
            BatchState,
        )> = vec![
            (
                "batch 0 becomes 1 without evaluating",
                Some(strict),
                BatchState::default(),
                2,
                0,
                10,
                true,
                BatchState::fresh(),
            ),
            (
                "nothing new finished: unchanged",
                Some(strict),
                state(2, false, 2, 0),
                2,
                0,
                10,
                false,
                state(2, false, 2, 0),
            ),
            (
                "fewer complete than the checkpoint: checkpoints reset, no evaluation",
                Some(strict),
                state(2, false, 4, 1),
                3,
                1,
                10,
                true,
                state(2, false, 3, 1),
            ),
            (
                "a successful batch",
                Some(strict),
                BatchState {
                    consecutive_failures: 0,
                    ..state(2, false, 2, 0)
                },
                4,
                0,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    ..state(2, false, 4, 0)
                },
            ),
            (
                "a failed batch under the safety limit stops at failureThreshold 1",
                Some(strict),
                state(2, false, 2, 0),
                3,
                1,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    consecutive_failures: 1,
                    should_stop: true,
                    ..state(2, true, 3, 1)
                },
            ),
            (
                "a failed batch past the safety limit never stops",
                Some(strict),
                state(2, false, 6, 0),
                7,
                1,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    consecutive_failures: 1,
                    ..state(2, true, 7, 1)
                },
            ),
            (
                "success at the threshold (50%) is not a failure and clears the count",
                Some(lenient),
                BatchState {
                    consecutive_failures: 1,
                    ..state(2, true, 2, 0)
                },
                3,
                1,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    ..state(2, false, 3, 1)
                },
            ),
            (
                "without failureThreshold failures only count",
                Some(fixed(2)),
                state(2, false, 0, 0),
                0,
                2,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    consecutive_failures: 1,
                    ..state(2, true, 0, 2)
                },
            ),
            (
                "no strategy: the batch number and size only",
                None,
                state(1, false, 0, 0),
                1,
                2,
                10,
                true,
                BatchState {
                    current_batch: 3,
                    ..state(3, false, 1, 2)
                },
            ),
        ];
        for (case, s, mut b, complete, erroring, total, changed, want) in cases {
            let f = Finished {
                complete,
                erroring,
                total,
            };
            assert_eq!(evaluate(s.as_ref(), &mut b, f), changed, "case: {case}");
            assert_eq!(b, want, "case: {case}");
        }
    }

    /// Hand-patched status counters at the ends of the integer range: no panic (this test runs
    /// in debug, where overflow panics), no wrap to a negative batch number.
    #[test]
    fn patched_extreme_counters_saturate() {
        for strategy in [
            None,
            Some(fixed(3)),
            Some(linear(2, 3)),
            Some(exponential(1, 2)),
        ] {
            for v in [i64::MAX, i64::MIN, 2_147_483_647] {
                let mut b = BatchState {
                    current_batch: v,
                    consecutive_failures: v,
                    completed_nodes: v,
                    failed_nodes: v,
                    last_batch_size: v,
                    last_batch_failed: true,
                    should_stop: false,
                    ..BatchState::default()
                };
                let size = batch_size(strategy.as_ref(), &b, 10, 10);
                assert!((1..=10).contains(&size), "{strategy:?} {v}: size {size}");
                let f = Finished {
                    complete: 4,
                    erroring: 1,
                    total: 10,
                };
                evaluate(strategy.as_ref(), &mut b, f);
                assert!(b.current_batch >= 1, "{strategy:?} {v}: {b:?}");
                assert!(b.consecutive_failures >= 0, "{strategy:?} {v}: {b:?}");
                for counter in [b.current_batch, b.consecutive_failures, b.last_batch_size] {
                    assert!(counter <= MAX_STATUS_COUNT, "{strategy:?} {v}: {b:?}");
                }
            }
        }
    }
}
