//! Dates, times, timestamps and intervals with `DateStyle = 'ISO, MDY'`,
//! `IntervalStyle = 'postgres'` and `TimeZone = 'UTC'`.
//!
//! All values count from 2000-01-01 (days for date, microseconds for the
//! others); the calendar is the proleptic Gregorian one, and years up to 0
//! print as `(1 − year) BC`. Timestamps with time zone are stored in UTC, so
//! with the session in UTC they print with offset `+00`.

use super::error::{malformed, TypeError};
use super::push::{push_2, push_i64, push_padded};
use super::read::{exact, i32_at, i64_at};

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;
/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_DAYS: i64 = 10_957;
/// Julian day number of 2000-01-01.
const PG_EPOCH_JDATE: i64 = 2_451_545;
/// First Julian day past the date range (5874898-01-01).
const DATE_END_JULIAN: i64 = 2_147_483_494;

/// `date_out`.
pub(super) fn date_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let days = i32::from_le_bytes(exact(oid, datum)?);
    match days {
        i32::MIN => out.push_str("-infinity"),
        i32::MAX => out.push_str("infinity"),
        _ => {
            let julian = i64::from(days) + PG_EPOCH_JDATE;
            if !(0..DATE_END_JULIAN).contains(&julian) {
                return Err(malformed(oid, 0, "date out of range"));
            }
            let (year, month, day) = civil_from_days(i64::from(days) + UNIX_TO_PG_DAYS);
            push_date(out, year, month, day);
            push_bc(out, year);
        }
    }
    Ok(())
}

/// `time_out`: `HH:MM:SS[.ffffff]`.
pub(super) fn time_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let usecs = i64::from_le_bytes(exact(oid, datum)?);
    if !(0..=USECS_PER_DAY).contains(&usecs) {
        return Err(malformed(oid, 0, "time out of range"));
    }
    push_time_of_day(out, usecs);
    Ok(())
}

/// `timetz_out`: the time, then the zone offset (stored in seconds west of
/// UTC) as `±HH[:MM[:SS]]`.
pub(super) fn timetz_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    exact::<12>(oid, datum)?;
    let usecs = i64_at(oid, datum, 0)?;
    let zone = i32_at(oid, datum, 8)?;
    if !(0..=USECS_PER_DAY).contains(&usecs) {
        return Err(malformed(oid, 0, "time out of range"));
    }
    push_time_of_day(out, usecs);
    push_zone(out, zone);
    Ok(())
}

/// `timestamp_out` (`with_zone` false) and `timestamptz_out` (true).
pub(super) fn timestamp_out(
    oid: u32,
    datum: &[u8],
    with_zone: bool,
    out: &mut String,
) -> Result<(), TypeError> {
    let ts = i64::from_le_bytes(exact(oid, datum)?);
    match ts {
        i64::MIN => out.push_str("-infinity"),
        i64::MAX => out.push_str("infinity"),
        _ => {
            let days = ts.div_euclid(USECS_PER_DAY);
            let time = ts.rem_euclid(USECS_PER_DAY);
            let julian = days + PG_EPOCH_JDATE;
            if !(0..=i64::from(i32::MAX)).contains(&julian) {
                return Err(malformed(oid, 0, "timestamp out of range"));
            }
            let (year, month, day) = civil_from_days(days + UNIX_TO_PG_DAYS);
            push_date(out, year, month, day);
            out.push(' ');
            push_time_of_day(out, time);
            if with_zone {
                out.push_str("+00");
            }
            push_bc(out, year);
        }
    }
    Ok(())
}

/// `interval_out` with `IntervalStyle = 'postgres'`, e.g.
/// `1 year -2 mons +3 days -04:05:06.5`; with `infinities` (PostgreSQL 17
/// and later) every field at its maximum is `infinity`, at its minimum
/// `-infinity`.
pub(super) fn interval_out(
    oid: u32,
    datum: &[u8],
    infinities: bool,
    out: &mut String,
) -> Result<(), TypeError> {
    exact::<16>(oid, datum)?;
    let time = i64_at(oid, datum, 0)?;
    let days = i32_at(oid, datum, 8)?;
    let months = i32_at(oid, datum, 12)?;
    if infinities {
        if (time, days, months) == (i64::MAX, i32::MAX, i32::MAX) {
            out.push_str("infinity");
            return Ok(());
        }
        if (time, days, months) == (i64::MIN, i32::MIN, i32::MIN) {
            out.push_str("-infinity");
            return Ok(());
        }
    }

    let hours = time / USECS_PER_HOUR;
    let rest = time - hours * USECS_PER_HOUR;
    let minutes = rest / USECS_PER_MINUTE;
    let rest = rest - minutes * USECS_PER_MINUTE;
    let seconds = rest / USECS_PER_SEC;
    let fraction = rest - seconds * USECS_PER_SEC;

    // Each non-zero field is preceded by a space unless it is the first, and
    // by `+` if positive right after a negative field.
    let mut first = true;
    let mut after_negative = false;
    let mut field = |out: &mut String, value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        if !first {
            out.push(' ');
        }
        if after_negative && value > 0 {
            out.push('+');
        }
        push_i64(out, value);
        out.push(' ');
        out.push_str(unit);
        if value != 1 {
            out.push('s');
        }
        after_negative = value < 0;
        first = false;
    };
    field(out, i64::from(months / 12), "year");
    field(out, i64::from(months % 12), "mon");
    field(out, i64::from(days), "day");

    if first || time != 0 {
        if !first {
            out.push(' ');
        }
        if time < 0 {
            out.push('-');
        } else if after_negative {
            out.push('+');
        }
        push_padded(out, hours.unsigned_abs(), 2);
        out.push(':');
        push_2(out, minutes.unsigned_abs() as u32);
        out.push(':');
        push_seconds(out, seconds.unsigned_abs(), fraction.unsigned_abs());
    }
    Ok(())
}

/// Year, month (1–12) and day (1–31) of a day count from 1970-01-01 in the
/// proleptic Gregorian calendar (year 0 is 1 BC).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift to a calendar starting on 0000-03-01 so leap days end each year,
    // then split into 400-year eras of 146097 days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD` with the BC year number for years up to 0.
fn push_date(out: &mut String, year: i64, month: u32, day: u32) {
    let shown = if year > 0 { year } else { 1 - year };
    push_padded(out, shown.unsigned_abs(), 4);
    out.push('-');
    push_2(out, month);
    out.push('-');
    push_2(out, day);
}

fn push_bc(out: &mut String, year: i64) {
    if year <= 0 {
        out.push_str(" BC");
    }
}

/// `HH:MM:SS[.ffffff]` of microseconds since midnight (24:00:00 allowed).
fn push_time_of_day(out: &mut String, usecs: i64) {
    let hours = usecs / USECS_PER_HOUR;
    let minutes = usecs / USECS_PER_MINUTE % 60;
    let seconds = usecs / USECS_PER_SEC % 60;
    let fraction = usecs % USECS_PER_SEC;
    push_2(out, hours as u32);
    out.push(':');
    push_2(out, minutes as u32);
    out.push(':');
    push_seconds(out, seconds as u64, fraction as u64);
}

/// Two-digit seconds, then `.` and the microseconds without trailing zeros
/// when there are any.
fn push_seconds(out: &mut String, seconds: u64, micros: u64) {
    push_padded(out, seconds, 2);
    if micros == 0 {
        return;
    }
    out.push('.');
    let mut digits = [0u8; 6];
    let mut rest = micros;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let used = digits.iter().rposition(|&d| d != b'0').map_or(0, |p| p + 1);
    super::push::push_ascii(out, digits.get(..used).unwrap_or_default());
}

/// `+HH`, `+HH:MM` or `+HH:MM:SS`; the stored zone is seconds west of UTC.
fn push_zone(out: &mut String, zone: i32) {
    let total = zone.unsigned_abs();
    let hours = total / 3600;
    let minutes = total / 60 % 60;
    let seconds = total % 60;
    out.push(if zone <= 0 { '+' } else { '-' });
    push_padded(out, u64::from(hours), 2);
    if minutes != 0 || seconds != 0 {
        out.push(':');
        push_2(out, minutes);
    }
    if seconds != 0 {
        out.push(':');
        push_2(out, seconds);
    }
}
