//! Messages that name things name a few and count the rest: a condition message is capped by the
//! CRD, and a list of thousands of node names is read by no one.

/// The first `shown` items joined by `sep`, then ` and N more` (`; and N more` when the items are
/// joined by `; `, so the count reads as one more item).
pub fn short_list<I>(items: I, shown: usize, sep: &str) -> String
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut list = String::new();
    let mut total = 0usize;
    for item in items {
        if total < shown {
            if total > 0 {
                list.push_str(sep);
            }
            list.push_str(item.as_ref());
        }
        total += 1;
    }
    if total > shown {
        let lead = if sep.starts_with(';') { ";" } else { "" };
        list.push_str(&format!("{lead} and {} more", total - shown));
    }
    list
}

#[cfg(test)]
mod tests {
    use super::short_list;

    #[test]
    fn names_the_first_and_counts_the_rest() {
        assert_eq!(short_list(["a", "b"], 2, ", "), "a, b");
        assert_eq!(short_list(["a", "b", "c"], 2, ", "), "a, b and 1 more");
        assert_eq!(short_list(["a", "b", "c"], 1, "; "), "a; and 2 more");
        assert_eq!(short_list(Vec::<String>::new(), 3, ", "), "");
    }
}
