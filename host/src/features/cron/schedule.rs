//! When a job fires: every N seconds, a cron expression in a time zone, or
//! once at a given time. Everything here comes from the model (the `cron`
//! tool) or the user's config, so every value is checked with a message
//! that says what to send instead.

use std::str::FromStr;

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// Shortest interval of a repeating job: a model cannot make the agent run
/// itself in a tight loop.
pub const MIN_EVERY_SECS: u64 = 10;

/// Longest interval (a year).
pub const MAX_EVERY_SECS: u64 = 366 * 24 * 3600;

/// A job's schedule, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Schedule {
    /// Every `secs` seconds from when the job was added.
    Every {
        /// The interval, in seconds.
        secs: u64,
    },
    /// A cron expression (5 fields `min hour dom month dow`, or 6 with
    /// seconds first) in an IANA time zone (`UTC` when not given).
    Cron {
        /// The cron expression.
        expr: String,
        /// The IANA time zone it is read in.
        tz: String,
    },
    /// Once, at this time.
    At {
        /// The time it fires.
        time: DateTime<Utc>,
    },
}

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

impl Schedule {
    /// A repeating schedule of `secs` seconds.
    pub fn every(secs: u64) -> Result<Schedule, ScheduleError> {
        if !(MIN_EVERY_SECS..=MAX_EVERY_SECS).contains(&secs) {
            return Err(ScheduleError(format!("every_seconds must be between {MIN_EVERY_SECS} and {MAX_EVERY_SECS}, not {secs}")));
        }
        Ok(Schedule::Every { secs })
    }

    /// A cron schedule; `tz` defaults to UTC.
    pub fn cron(expr: &str, tz: Option<&str>) -> Result<Schedule, ScheduleError> {
        let tz = tz.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("UTC");
        parse_tz(tz)?;
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        parse_cron(&expr)?;
        let schedule = Schedule::Cron { expr, tz: tz.to_string() };
        if schedule.next_after(Utc::now()).is_none() {
            return Err(ScheduleError(format!("cron expression `{}` never fires", clip(&schedule_expr(&schedule)))));
        }
        Ok(schedule)
    }

    /// A one-shot at `text`: RFC 3339 (`2026-12-24T09:00:00+01:00`), or a
    /// time without offset (`2026-12-24T09:00`), read in `tz` (UTC when not
    /// given). Must be in the future of `now`.
    pub fn at(text: &str, tz: Option<&str>, now: DateTime<Utc>) -> Result<Schedule, ScheduleError> {
        let text = text.trim();
        let time = match DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&Utc),
            Err(_) => {
                let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
                    .iter()
                    .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
                    .ok_or_else(|| ScheduleError(format!("`at` must be an ISO time like 2026-12-24T09:00:00+01:00 or 2026-12-24T09:00, not `{}`", clip(text))))?;
                let zone = parse_tz(tz.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("UTC"))?;
                zone.from_local_datetime(&naive)
                    .earliest()
                    .ok_or_else(|| ScheduleError(format!("`{}` does not exist in time zone {}", clip(text), zone.name())))?
                    .with_timezone(&Utc)
            }
        };
        if time <= now {
            return Err(ScheduleError(format!("`at` {} is in the past (now is {})", time.to_rfc3339(), now.to_rfc3339())));
        }
        Ok(Schedule::At { time })
    }

    /// The first time strictly after `after` this schedule fires (an
    /// `Every`: one interval later). `None`: never again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every { secs } => Some(after + Duration::seconds(*secs as i64)),
            Schedule::Cron { expr, tz } => {
                let schedule = parse_cron(expr).ok()?;
                let zone = parse_tz(tz).ok()?;
                schedule.after(&after.with_timezone(&zone)).next().map(|t| t.with_timezone(&Utc))
            }
            Schedule::At { time } => (*time > after).then_some(*time),
        }
    }

    /// The next run after a run due at `due` that happened at `now`: a
    /// repeating job does not try to catch up the runs it missed (a gateway
    /// that was down for a day runs it once, then keeps to its rhythm).
    pub fn next_from(&self, due: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every { secs } => {
                let step = Duration::seconds(*secs as i64);
                let mut next = due + step;
                if next <= now {
                    let behind = (now - due).num_seconds() / *secs as i64;
                    next = due + step * (behind as i32 + 1);
                }
                Some(next)
            }
            _ => self.next_after(now.max(due)),
        }
    }

    /// In words, for the tool's answers and `/status`.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Every { secs } if secs % 3600 == 0 => format!("every {} h", secs / 3600),
            Schedule::Every { secs } if secs % 60 == 0 => format!("every {} min", secs / 60),
            Schedule::Every { secs } => format!("every {secs} s"),
            Schedule::Cron { expr, tz } => format!("cron `{expr}` ({tz})"),
            Schedule::At { time } => format!("once at {}", time.to_rfc3339()),
        }
    }

    /// Whether it fires only once.
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Schedule::At { .. })
    }
}

fn schedule_expr(schedule: &Schedule) -> String {
    match schedule {
        Schedule::Cron { expr, .. } => expr.clone(),
        _ => String::new(),
    }
}

/// A cron expression: the usual 5 fields get a `0` seconds field in front
/// (the `cron` crate counts seconds first).
fn parse_cron(expr: &str) -> Result<cron::Schedule, ScheduleError> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {expr}"),
        6 | 7 => expr.to_string(),
        _ => return Err(ScheduleError(format!("cron expression `{}` has {fields} fields; use 5 (`min hour day month weekday`, e.g. `0 9 * * 1-5`)", clip(expr)))),
    };
    cron::Schedule::from_str(&full).map_err(|e| ScheduleError(format!("cron expression `{}` is not valid: {e}", clip(expr))))
}

fn parse_tz(tz: &str) -> Result<chrono_tz::Tz, ScheduleError> {
    tz.parse::<chrono_tz::Tz>().map_err(|_| ScheduleError(format!("unknown time zone `{}`; use an IANA name like Europe/Berlin or UTC", clip(tz))))
}

fn clip(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::clip_for_terminal(text, 120, "value").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn every_is_bounded_and_does_not_catch_up() {
        assert!(Schedule::every(5).unwrap_err().0.contains("between 10"));
        let s = Schedule::every(60).unwrap();
        let due = t("2026-01-01T00:00:00Z");
        assert_eq!(s.next_from(due, due + Duration::seconds(1)), Some(t("2026-01-01T00:01:00Z")));
        // Down for an hour and a half: the next run is the next minute mark.
        assert_eq!(s.next_from(due, t("2026-01-01T01:30:10Z")), Some(t("2026-01-01T01:31:00Z")));
        assert_eq!(s.describe(), "every 1 min");
    }

    #[test]
    fn cron_reads_five_fields_in_a_time_zone() {
        let s = Schedule::cron("0 9 * * *", Some("Europe/Berlin")).unwrap();
        // 09:00 in Berlin in winter is 08:00 UTC.
        assert_eq!(s.next_after(t("2026-01-05T07:00:00Z")), Some(t("2026-01-05T08:00:00Z")));
        assert_eq!(s.next_after(t("2026-01-05T08:00:00Z")), Some(t("2026-01-06T08:00:00Z")));
        assert!(Schedule::cron("0 9 * *", None).unwrap_err().0.contains("5"));
        assert!(Schedule::cron("0 99 * * *", None).unwrap_err().0.contains("not valid"));
        assert!(Schedule::cron("0 9 * * *", Some("Mars/Olympus")).unwrap_err().0.contains("unknown time zone"));
        assert_eq!(Schedule::cron("  0  9 * * 1-5 ", None).unwrap(), Schedule::Cron { expr: "0 9 * * 1-5".into(), tz: "UTC".into() });
    }

    #[test]
    fn at_takes_rfc3339_or_a_local_time_and_refuses_the_past() {
        let now = t("2026-06-01T12:00:00Z");
        assert_eq!(Schedule::at("2026-06-01T14:00:00+02:00", None, now).unwrap_err().0.contains("in the past"), true);
        assert_eq!(Schedule::at("2026-06-02T09:00", Some("Europe/Berlin"), now).unwrap(), Schedule::At { time: t("2026-06-02T07:00:00Z") });
        assert_eq!(Schedule::at("2026-06-02 09:00", None, now).unwrap(), Schedule::At { time: t("2026-06-02T09:00:00Z") });
        assert!(Schedule::at("tomorrow", None, now).unwrap_err().0.contains("ISO time"));
        let once = Schedule::at("2026-06-02T09:00:00Z", None, now).unwrap();
        assert_eq!(once.next_after(now), Some(t("2026-06-02T09:00:00Z")));
        assert_eq!(once.next_after(t("2026-06-02T09:00:00Z")), None, "fires once");
        assert!(once.is_one_shot());
    }
}
