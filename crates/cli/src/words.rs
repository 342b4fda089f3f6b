//! Numbers, sizes, dates and ids in sentences: "1 group", "1.5 KiB",
//! "2024-05-01 12:34:56 UTC", a UUID. Every command uses them; they use
//! nothing of the crate.

use dualfs_engine::types::Timestamp;

/// `n` and the noun, singular for exactly one: `count(1, "symlink")` is
/// "1 symlink". The plural adds an s, `es` after s, x, sh and ch, and
/// turns a y after a consonant into `ies`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    if let Some(stem) = noun.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'o', 'u'])
    {
        return format!("{n} {stem}ies");
    }
    let es = ["s", "x", "sh", "ch"].iter().any(|e| noun.ends_with(e));
    format!("{n} {noun}{}", if es { "es" } else { "s" })
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A UUID in its usual text form.
pub fn uuid(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// `2024-05-01 12:34:56.123456789 UTC` (proleptic Gregorian, any year).
pub fn date(t: Timestamp) -> String {
    let days = t.sec.div_euclid(86_400);
    let secs = t.sec.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09} UTC", secs / 3600, secs / 60 % 60, secs % 60, t.nsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_others_plural() {
        assert_eq!(count(1, "group"), "1 group");
        assert_eq!(count(0, "group"), "0 groups");
        assert_eq!(count(2, "symlink"), "2 symlinks");
        assert_eq!(count(3, "match"), "3 matches");
        assert_eq!(count(4, "entry"), "4 entries");
        assert_eq!(count(4, "key"), "4 keys");
    }

    #[test]
    fn human_sizes_read_well() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
