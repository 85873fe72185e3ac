//! Maintenance windows (an extension of this project, issue 38): a compartment starts new nodes
//! only while one of its windows is open; nodes at work finish whatever the clock says.
//!
//! A window opens on each of its `days` (every day when none) at `start` and closes at `end` in
//! its time zone; an `end` not after `start` closes on the next day. The edges are guarded by
//! [`EDGE_GUARD`]: nothing starts in the first or last seconds of a window, so a clock a few
//! seconds off (ours or the API server's) never starts a node outside it. A window may instead
//! open at each time a cron expression fires and stay open for a duration ([`super::cron`]).

use std::time::Duration;

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use super::cron::Cron;
use super::messages::{
    MSG_WINDOW_CRON, MSG_WINDOW_DURATION, MSG_WINDOW_SHAPE, MSG_WINDOW_TIME, MSG_WINDOW_TIME_ZONE,
};
use super::{MaintenanceWindow, WindowDay};

/// No node starts this close to a window's opening or closing.
pub const EDGE_GUARD: Duration = Duration::from_secs(10);

/// A window, parsed.
#[derive(Debug, Clone)]
pub struct Window {
    shape: Shape,
    tz: TimeZone,
    /// The time zone's name, for messages.
    pub zone: String,
}

/// When a window opens and how long it lasts.
#[derive(Debug, Clone)]
enum Shape {
    /// On `days` (every day when none), from `start` to `end`.
    Daily {
        days: Vec<Weekday>,
        start: Time,
        end: Time,
    },
    /// At each time `cron` fires, for `duration`.
    Cron {
        cron: Box<Cron>,
        duration: jiff::SignedDuration,
    },
}

/// Whether new nodes may start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// No window, or inside one.
    Open,
    /// Outside every window; the next opening (guard included), if one comes within a week.
    Closed { next: Option<Timestamp> },
}

impl Window {
    /// The window, or the field (under `field`) that cannot be read and why.
    pub fn parse(w: &MaintenanceWindow, field: &str) -> Result<Window, (String, String)> {
        let zone = w.time_zone.clone().unwrap_or_else(|| "UTC".to_string());
        let tz = TimeZone::get(&zone).map_err(|_| {
            (
                format!("{field}.timeZone"),
                format!("timeZone: {MSG_WINDOW_TIME_ZONE}, got {zone:?}"),
            )
        })?;
        let time = |v: &str, name: &str| {
            parse_time(v).ok_or_else(|| {
                (
                    format!("{field}.{name}"),
                    format!("{name}: {MSG_WINDOW_TIME}, got {v:?}"),
                )
            })
        };
        let daily = !w.start.is_empty() || !w.end.is_empty();
        let shape = match (&w.cron, &w.duration, daily) {
            (None, None, true) => Shape::Daily {
                days: w.days.iter().map(|d| d.weekday()).collect(),
                start: time(&w.start, "start")?,
                end: time(&w.end, "end")?,
            },
            (Some(cron), Some(duration), false) if w.days.is_empty() => {
                let cron = Cron::parse(cron).map_err(|why| {
                    (
                        format!("{field}.cron"),
                        format!("cron: {MSG_WINDOW_CRON}: {why}"),
                    )
                })?;
                let duration = crate::schema::parse_go_duration(duration)
                    .ok()
                    .filter(|d| !d.is_zero() && *d <= Duration::from_secs(168 * 3600))
                    .and_then(|d| jiff::SignedDuration::try_from(d).ok())
                    .ok_or_else(|| {
                        (
                            format!("{field}.duration"),
                            format!("duration: {MSG_WINDOW_DURATION}, got {duration:?}"),
                        )
                    })?;
                Shape::Cron {
                    cron: Box::new(cron),
                    duration,
                }
            }
            _ => return Err((field.to_string(), MSG_WINDOW_SHAPE.to_string())),
        };
        Ok(Window { shape, tz, zone })
    }

    /// The (open, close) intervals that start on the day before `now`'s through eight days
    /// after it, in order.
    /// For a cron window, those that start from its duration (and a day) before `now`.
    fn intervals(&self, now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        let today = now.to_zoned(self.tz.clone()).date();
        match &self.shape {
            Shape::Daily { days, start, end } => (-1i64..=8)
                .filter_map(|offset| today.checked_add(offset.days()).ok())
                .filter(|d| days.is_empty() || days.contains(&d.weekday()))
                .filter_map(|d| self.interval(d, *start, *end))
                .collect(),
            Shape::Cron { cron, duration } => {
                let back = -(duration.as_hours() / 24 + 1);
                (back..=8)
                    .filter_map(|offset| today.checked_add(offset.days()).ok())
                    .filter(|d| cron.fires_on(*d))
                    .flat_map(|d| {
                        cron.times().filter_map(move |t| {
                            let open = d.to_datetime(t).to_zoned(self.tz.clone()).ok()?;
                            let open = open.timestamp();
                            Some((open, open.checked_add(*duration).ok()?))
                        })
                    })
                    .collect()
            }
        }
    }

    fn interval(&self, day: Date, start: Time, end: Time) -> Option<(Timestamp, Timestamp)> {
        let open = day.to_datetime(start).to_zoned(self.tz.clone()).ok()?;
        let close_day = if end > start {
            day
        } else {
            day.checked_add(1.day()).ok()?
        };
        let close = close_day.to_datetime(end).to_zoned(self.tz.clone()).ok()?;
        Some((open.timestamp(), close.timestamp()))
    }
}

/// `HH:MM`, 24-hour.
fn parse_time(v: &str) -> Option<Time> {
    let (h, m) = v.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    Time::new(h.parse().ok()?, m.parse().ok()?, 0, 0).ok()
}

/// The gate of a compartment with these windows at `now`.
pub fn gate(windows: &[Window], now: Timestamp) -> Gate {
    if windows.is_empty() {
        return Gate::Open;
    }
    let guard = jiff::SignedDuration::try_from(EDGE_GUARD).unwrap_or_default();
    let mut next: Option<Timestamp> = None;
    for w in windows {
        for (open, close) in w.intervals(now) {
            let (Ok(from), Ok(to)) = (open.checked_add(guard), close.checked_sub(guard)) else {
                continue;
            };
            if from <= now && now < to {
                return Gate::Open;
            }
            if from > now && from < to {
                next = Some(next.map_or(from, |n| n.min(from)));
            }
        }
    }
    Gate::Closed { next }
}

impl WindowDay {
    fn weekday(self) -> Weekday {
        match self {
            WindowDay::Mon => Weekday::Monday,
            WindowDay::Tue => Weekday::Tuesday,
            WindowDay::Wed => Weekday::Wednesday,
            WindowDay::Thu => Weekday::Thursday,
            WindowDay::Fri => Weekday::Friday,
            WindowDay::Sat => Weekday::Saturday,
            WindowDay::Sun => Weekday::Sunday,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(days: &[WindowDay], start: &str, end: &str, tz: &str) -> Window {
        let w = MaintenanceWindow {
            days: days.to_vec(),
            start: start.into(),
            end: end.into(),
            time_zone: Some(tz.into()),
            ..Default::default()
        };
        Window::parse(&w, "spec.windows[0]").unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn open_inside_closed_outside_with_guarded_edges() {
        // 22:00 to 04:00 in Berlin (UTC+1 in November), Fridays only.
        let w = [window(&[WindowDay::Fri], "22:00", "04:00", "Europe/Berlin")];
        // Friday 2026-11-27 22:00 Berlin = 21:00 UTC.
        assert_eq!(
            gate(&w, at("2026-11-27T20:59:00Z")),
            Gate::Closed {
                next: Some(at("2026-11-27T21:00:10Z"))
            }
        );
        assert_eq!(
            gate(&w, at("2026-11-27T21:00:05Z")),
            Gate::Closed {
                next: Some(at("2026-11-27T21:00:10Z"))
            },
            "inside the opening guard"
        );
        assert_eq!(gate(&w, at("2026-11-27T21:00:10Z")), Gate::Open);
        // Past midnight it is still Friday's window (closes Saturday 04:00 = 03:00 UTC).
        assert_eq!(gate(&w, at("2026-11-28T02:59:49Z")), Gate::Open);
        assert_eq!(
            gate(&w, at("2026-11-28T02:59:55Z")),
            Gate::Closed {
                next: Some(at("2026-12-04T21:00:10Z"))
            },
            "inside the closing guard: next Friday"
        );
    }

    #[test]
    fn no_window_is_always_open_and_several_take_the_earliest() {
        assert_eq!(gate(&[], at("2026-11-28T12:00:00Z")), Gate::Open);
        let w = [
            window(&[], "09:00", "10:00", "UTC"),
            window(&[], "05:30", "06:00", "Asia/Kolkata"),
        ];
        // 05:30 in Kolkata (UTC+5:30) is 00:00 UTC.
        assert_eq!(
            gate(&w, at("2026-11-28T12:00:00Z")),
            Gate::Closed {
                next: Some(at("2026-11-29T00:00:10Z"))
            }
        );
        assert_eq!(gate(&w, at("2026-11-28T09:30:00Z")), Gate::Open);
    }

    #[test]
    fn bad_fields_are_named() {
        let mut w = MaintenanceWindow {
            start: "22:00".into(),
            end: "4:00".into(),
            time_zone: Some("Mars/Olympus".into()),
            ..Default::default()
        };
        let (field, why) = Window::parse(&w, "spec.windows[1]").unwrap_err();
        assert_eq!(field, "spec.windows[1].timeZone");
        assert!(why.contains("Mars/Olympus"), "{why}");
        w.time_zone = None;
        let (field, _) = Window::parse(&w, "spec.windows[1]").unwrap_err();
        assert_eq!(field, "spec.windows[1].end");
        w.end = "24:00".into();
        assert!(Window::parse(&w, "w").is_err());
        w.end = "23:59".into();
        assert!(Window::parse(&w, "w").is_ok());
    }

    #[test]
    fn a_cron_window_opens_when_it_fires_for_its_duration() {
        // Weekdays 22:30 for 2h, New York time (UTC-5 in November).
        let w = MaintenanceWindow {
            cron: Some("30 22 * * 1-5".into()),
            duration: Some("2h".into()),
            time_zone: Some("America/New_York".into()),
            ..Default::default()
        };
        let w = [Window::parse(&w, "spec.windows[0]").unwrap()];
        // Friday 2026-11-27 22:30 New York = Saturday 03:30 UTC.
        assert_eq!(gate(&w, at("2026-11-28T03:31:00Z")), Gate::Open);
        assert_eq!(gate(&w, at("2026-11-28T05:29:45Z")), Gate::Open);
        // Closed over the weekend: next Monday 22:30 = Tuesday 03:30 UTC.
        assert_eq!(
            gate(&w, at("2026-11-28T06:00:00Z")),
            Gate::Closed {
                next: Some(at("2026-12-01T03:30:10Z"))
            }
        );
    }

    #[test]
    fn a_window_is_either_daily_or_cron() {
        let both = MaintenanceWindow {
            start: "22:00".into(),
            end: "23:00".into(),
            cron: Some("0 22 * * *".into()),
            duration: Some("1h".into()),
            ..Default::default()
        };
        let (field, why) = Window::parse(&both, "spec.windows[0]").unwrap_err();
        assert_eq!(field, "spec.windows[0]");
        assert!(why.contains("either"), "{why}");
        let bad_cron = MaintenanceWindow {
            cron: Some("0 25 * * *".into()),
            duration: Some("1h".into()),
            ..Default::default()
        };
        assert_eq!(Window::parse(&bad_cron, "w").unwrap_err().0, "w.cron");
        let long = MaintenanceWindow {
            cron: Some("0 22 * * *".into()),
            duration: Some("200h".into()),
            ..Default::default()
        };
        assert_eq!(Window::parse(&long, "w").unwrap_err().0, "w.duration");
    }
}
