//! Checkers for what the two modes promise, over a history of calls as clients saw them: each
//! call's start and end (on one clock the observer reads, in any unit) and the values it got.
//! The chaos suite and the load tester record such histories; the unit tests plant violations
//! to show each checker catches them.

use std::collections::HashMap;

/// One call as its client saw it: began at `start`, returned at `end` (`start <= end`), with
/// `values` (in the order answered; empty for a call that failed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub start: u64,
    pub end: u64,
    pub values: Vec<u64>,
}

/// A pair of calls the strict mode forbids: `earlier` returned before `later` began, yet
/// `later` holds a value not above every value of `earlier`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderViolation {
    pub earlier: usize,
    pub later: usize,
}

/// A value answered more than once, with the calls that got it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub value: u64,
    pub calls: Vec<usize>,
}

/// Every value answered more than once (both modes promise none).
pub fn duplicates(calls: &[Call]) -> Vec<Duplicate> {
    let mut by_value: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, c) in calls.iter().enumerate() {
        for &v in &c.values {
            by_value.entry(v).or_default().push(i);
        }
    }
    let mut out: Vec<Duplicate> = by_value
        .into_iter()
        .filter(|(_, calls)| calls.len() > 1)
        .map(|(value, calls)| Duplicate { value, calls })
        .collect();
    out.sort_by_key(|d| d.value);
    out
}

/// The strict mode's real-time order: every pair of calls where one ended before the other
/// began must be ordered by value. Answers, for each later call that breaks it, the earlier
/// call with the largest value among those that ended before it began (so a history with
/// violations yields at least one per offending call). O(n log n).
pub fn real_time_order(calls: &[Call]) -> Vec<OrderViolation> {
    let answered: Vec<usize> = (0..calls.len())
        .filter(|&i| !calls[i].values.is_empty())
        .collect();
    let mut by_end = answered.clone();
    by_end.sort_by_key(|&i| calls[i].end);
    let mut by_start = answered;
    by_start.sort_by_key(|&i| calls[i].start);
    let max_of = |i: usize| *calls[i].values.iter().max().expect("answered");
    let min_of = |i: usize| *calls[i].values.iter().min().expect("answered");
    let mut out = Vec::new();
    // The call with the largest value among those ended so far.
    let mut best: Option<usize> = None;
    let mut e = 0;
    for &b in &by_start {
        while e < by_end.len() && calls[by_end[e]].end < calls[b].start {
            let a = by_end[e];
            if best.is_none_or(|x| max_of(a) > max_of(x)) {
                best = Some(a);
            }
            e += 1;
        }
        if let Some(a) = best.filter(|&a| max_of(a) >= min_of(b)) {
            out.push(OrderViolation {
                earlier: a,
                later: b,
            });
        }
    }
    out
}

/// The dense mode's gap bound: values not answered below the largest answered, beyond what
/// `allowed` (the most the holders' blocks can lose) permits. Counts the missing values of
/// `start, start + step, …` up to the largest value answered, and answers how many are
/// missing when that exceeds `allowed`.
pub fn gaps_beyond(calls: &[Call], start: u64, step: u64, allowed: u64) -> Option<u64> {
    let mut values: Vec<u64> = calls
        .iter()
        .flat_map(|c| c.values.iter().copied())
        .collect();
    values.sort_unstable();
    values.dedup();
    let top = *values.last()?;
    let expected = (top.saturating_sub(start)) / step.max(1) + 1;
    let missing = expected.saturating_sub(values.len() as u64);
    (missing > allowed).then_some(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: u64, end: u64, values: &[u64]) -> Call {
        Call {
            start,
            end,
            values: values.to_vec(),
        }
    }

    #[test]
    fn concurrent_calls_may_come_in_any_order_but_sequential_ones_may_not() {
        // 0 and 1 overlap (either order is fine); 2 began after both ended.
        let ok = [call(0, 10, &[5]), call(2, 12, &[4]), call(13, 14, &[6])];
        assert!(real_time_order(&ok).is_empty());
        // Planted: call 2 began after call 0 ended but got a smaller value.
        let bad = [call(0, 10, &[5]), call(2, 12, &[7]), call(13, 14, &[6])];
        assert_eq!(
            real_time_order(&bad),
            vec![OrderViolation {
                earlier: 1,
                later: 2
            }]
        );
        // A batch's every value counts: 3 ended holding 9, 4 began later holding 8.
        let batch = [call(0, 1, &[7, 8, 9]), call(2, 3, &[8, 10])];
        assert_eq!(real_time_order(&batch).len(), 1);
        // Equal times are concurrent (end == start does not order them).
        assert!(real_time_order(&[call(0, 5, &[2]), call(5, 6, &[1])]).is_empty());
        // Failed calls order nothing.
        assert!(real_time_order(&[call(0, 1, &[]), call(2, 3, &[1])]).is_empty());
    }

    #[test]
    fn every_violating_call_is_reported_among_many() {
        let mut calls: Vec<Call> = (0..1000)
            .map(|i| call(i * 2, i * 2 + 1, &[i + 1]))
            .collect();
        assert!(real_time_order(&calls).is_empty());
        calls[500].values = vec![3];
        calls[900].values = vec![899];
        let v = real_time_order(&calls);
        let later: Vec<usize> = v.iter().map(|v| v.later).collect();
        assert!(later.contains(&500) && later.contains(&900), "{v:?}");
    }

    #[test]
    fn duplicates_name_the_value_and_every_call() {
        let calls = [
            call(0, 1, &[1, 2]),
            call(0, 1, &[3]),
            call(5, 6, &[2, 4, 3]),
        ];
        assert_eq!(
            duplicates(&calls),
            vec![
                Duplicate {
                    value: 2,
                    calls: vec![0, 2]
                },
                Duplicate {
                    value: 3,
                    calls: vec![1, 2]
                }
            ]
        );
        assert!(duplicates(&calls[..2]).is_empty());
    }

    #[test]
    fn gaps_count_missing_values_of_the_progression() {
        let calls = [call(0, 1, &[10, 13]), call(0, 1, &[19])];
        // 10, 13, 16, 19: 16 is missing.
        assert_eq!(gaps_beyond(&calls, 10, 3, 0), Some(1));
        assert_eq!(gaps_beyond(&calls, 10, 3, 1), None);
        assert_eq!(gaps_beyond(&[], 1, 1, 0), None);
    }
}
