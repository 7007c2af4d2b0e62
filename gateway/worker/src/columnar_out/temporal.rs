//! Dates and times as ISO 8601 text, for JSON: computed from the proleptic Gregorian calendar
//! here, not with a date library (a few lines, and every Arrow value has a form: years beyond
//! 9999 or before 1 are written with their sign, as ISO 8601's expanded years are).

use arrow_schema::TimeUnit;

const SECONDS_PER_DAY: i64 = 86_400;
const MILLIS_PER_DAY: i64 = 86_400_000;

/// `days` since 1970-01-01 as `YYYY-MM-DD`.
pub(super) fn date(days: i64) -> String {
    let (y, m, d) = civil(days);
    if (0..=9999).contains(&y) {
        format!("{y:04}-{m:02}-{d:02}")
    } else {
        format!("{y:+05}-{m:02}-{d:02}")
    }
}

/// A date64 (milliseconds since the epoch, which the format says are whole days): `YYYY-MM-DD`
/// when it is a whole day, else the timestamp in milliseconds.
pub(super) fn date64(millis: i64) -> String {
    if millis % MILLIS_PER_DAY == 0 {
        date(millis / MILLIS_PER_DAY)
    } else {
        timestamp(millis, TimeUnit::Millisecond, false)
    }
}

/// How many units a second has, and the fraction digits of the unit.
fn per_second(unit: TimeUnit) -> (i64, usize) {
    match unit {
        TimeUnit::Second => (1, 0),
        TimeUnit::Millisecond => (1_000, 3),
        TimeUnit::Microsecond => (1_000_000, 6),
        TimeUnit::Nanosecond => (1_000_000_000, 9),
    }
}

/// `value` units since the epoch as `YYYY-MM-DDTHH:MM:SS[.fraction]`, with `Z` when `utc` (a
/// timestamp with a time zone is an instant, stored in UTC).
pub(super) fn timestamp(value: i64, unit: TimeUnit, utc: bool) -> String {
    let (per, _) = per_second(unit);
    let seconds = value.div_euclid(per);
    let fraction = value.rem_euclid(per);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let in_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let mut out = date(days);
    out.push('T');
    out.push_str(&clock(in_day, fraction, unit));
    if utc {
        out.push('Z');
    }
    out
}

/// A time of day (`value` units since midnight) as `HH:MM:SS[.fraction]`.
pub(super) fn time(value: i64, unit: TimeUnit) -> String {
    let (per, _) = per_second(unit);
    clock(value.div_euclid(per), value.rem_euclid(per), unit)
}

fn clock(seconds: i64, fraction: i64, unit: TimeUnit) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match per_second(unit) {
        (_, 0) => format!("{h:02}:{m:02}:{s:02}"),
        (_, digits) => format!("{h:02}:{m:02}:{s:02}.{fraction:0digits$}"),
    }
}

/// Year, month and day of `days` since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], from March
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, u32::try_from(m).unwrap_or(1), u32::try_from(d).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_proleptic_gregorian() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(-1), "1969-12-31");
        assert_eq!(date(11_016), "2000-02-29");
        assert_eq!(date(19_782), "2024-02-29");
        assert_eq!(date(-719_528), "0000-01-01");
        assert_eq!(date(-719_529), "-0001-12-31");
        assert_eq!(date(2_932_897), "+10000-01-01");
        assert_eq!(date64(86_400_000), "1970-01-02");
        assert_eq!(date64(1), "1970-01-01T00:00:00.001");
        // Every value has a form (no overflow at the extremes).
        assert!(date(i64::MAX).starts_with('+'));
        assert!(date(i64::MIN).starts_with('-'));
        assert!(timestamp(i64::MIN, TimeUnit::Second, true).ends_with('Z'));
    }

    #[test]
    fn timestamps_and_times_keep_their_unit() {
        assert_eq!(timestamp(0, TimeUnit::Second, false), "1970-01-01T00:00:00");
        assert_eq!(timestamp(1_500, TimeUnit::Millisecond, true), "1970-01-01T00:00:01.500Z");
        assert_eq!(timestamp(-1, TimeUnit::Microsecond, false), "1969-12-31T23:59:59.999999");
        assert_eq!(
            timestamp(1_709_210_096_123_456_789, TimeUnit::Nanosecond, true),
            "2024-02-29T12:34:56.123456789Z"
        );
        assert_eq!(time(45_296, TimeUnit::Second), "12:34:56");
        assert_eq!(time(45_296_007, TimeUnit::Millisecond), "12:34:56.007");
        assert_eq!(time(1, TimeUnit::Nanosecond), "00:00:00.000000001");
    }
}
