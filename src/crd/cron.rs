//! The five-field cron expressions of maintenance windows (`minute hour day-of-month month
//! day-of-week`, as crontab(5) and Kubernetes CronJobs write them): numbers, `*`, ranges `a-b`,
//! steps `*/n` and `a-b/n`, lists `a,b`; day of week 0-7 (0 and 7 are Sunday). As in cron, when
//! both day fields are restricted a day matching either one fires.

use jiff::civil::{Date, Time};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: Vec<u8>,
    hours: Vec<u8>,
    days: [bool; 32],
    months: [bool; 13],
    weekdays: [bool; 7],
    any_day: bool,
    any_weekday: bool,
}

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [m, h, dom, mon, dow] = fields[..] else {
            return Err(format!(
                "{text:?} has {} fields; a cron expression has five: minute hour day-of-month month day-of-week",
                fields.len()
            ));
        };
        let minutes = field(m, 0, 59, "minute")?;
        let hours = field(h, 0, 23, "hour")?;
        let mut days = [false; 32];
        field(dom, 1, 31, "day of month")?
            .into_iter()
            .for_each(|d| days[usize::from(d)] = true);
        let mut months = [false; 13];
        field(mon, 1, 12, "month")?
            .into_iter()
            .for_each(|d| months[usize::from(d)] = true);
        let mut weekdays = [false; 7];
        field(dow, 0, 7, "day of week")?
            .into_iter()
            .for_each(|d| weekdays[usize::from(d % 7)] = true);
        Ok(Cron {
            minutes,
            hours,
            days,
            months,
            weekdays,
            any_day: dom.starts_with('*'),
            any_weekday: dow.starts_with('*'),
        })
    }

    /// Whether the schedule fires on `day` (at some minute).
    pub fn fires_on(&self, day: Date) -> bool {
        let month = usize::try_from(day.month()).unwrap_or(0);
        if !self.months.get(month).copied().unwrap_or(false) {
            return false;
        }
        let dom = self.days[usize::try_from(day.day()).unwrap_or(0).min(31)];
        let dow = self.weekdays[usize::from(day.weekday().to_sunday_zero_offset() as u8)];
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            (false, false) => dom || dow,
        }
    }

    /// The times of day it fires at, in order.
    pub fn times(&self) -> impl Iterator<Item = Time> + '_ {
        self.hours.iter().flat_map(move |h| {
            self.minutes
                .iter()
                .filter_map(move |m| Time::new(*h as i8, *m as i8, 0, 0).ok())
        })
    }
}

/// One field's values, sorted, deduplicated.
fn field(text: &str, min: u8, max: u8, what: &str) -> Result<Vec<u8>, String> {
    let bad = |why: &str| format!("{what} field {text:?}: {why} (allowed {min}-{max})");
    let mut out = Vec::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u8>().map_err(|_| bad("bad step"))?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(bad("a step of 0"));
        }
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let a = a.parse::<u8>().map_err(|_| bad("not a number"))?;
            let b = b.parse::<u8>().map_err(|_| bad("not a number"))?;
            (a, b)
        } else {
            let a = range.parse::<u8>().map_err(|_| bad("not a number"))?;
            // `a/n` means from a to the end, as in cron.
            (a, if part.contains('/') { max } else { a })
        };
        if lo < min || hi > max || lo > hi {
            return Err(bad("out of range"));
        }
        out.extend((lo..=hi).step_by(usize::from(step)));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse_as_cron_reads_them() {
        let c = Cron::parse("30 22 * * 1-5").expect("cron");
        let times: Vec<String> = c.times().map(|t| t.to_string()).collect();
        assert_eq!(times, ["22:30:00"]);
        // 2026-11-27 is a Friday, 2026-11-28 a Saturday.
        assert!(c.fires_on(jiff::civil::date(2026, 11, 27)));
        assert!(!c.fires_on(jiff::civil::date(2026, 11, 28)));
        let c = Cron::parse("*/20 1,3 1 * 0").expect("cron");
        assert_eq!(c.times().count(), 6);
        // Either day field: the 1st of a month, or any Sunday.
        assert!(c.fires_on(jiff::civil::date(2026, 12, 1)));
        assert!(c.fires_on(jiff::civil::date(2026, 11, 29)));
        assert!(!c.fires_on(jiff::civil::date(2026, 11, 30)));
        assert!(
            Cron::parse("0 0 * * 7")
                .expect("7 is Sunday")
                .fires_on(jiff::civil::date(2026, 11, 29))
        );
        for bad in [
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "*/0 * * * *",
            "a * * * *",
            "5-1 * * * *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }
}
