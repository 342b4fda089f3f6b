//! Numbers in sentences: "1 group", "2 groups".

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
}
