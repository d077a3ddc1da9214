use std::time::Duration;

/// Parses a duration such as `"30s"`, `"1m 30s"`, `"250ms"` or `"2h"`.
///
/// Bare numbers are refused: `timeout = 30` is ambiguous (seconds? milliseconds?) and NGINX
/// users have been bitten by that for years.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        format!("`{s}` is not a duration ({e}); write it with a unit, such as \"250ms\", \"30s\", \"5m\" or \"1h\"")
    })
}

/// Parses a size such as `16384`, `"16k"`, `"10MiB"` or `"1g"` into bytes (k = 1024).
pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write a number of bytes or use a unit such as \"16k\", \"10m\", \"1g\""))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "`{s}` has an unknown unit `{other}`; use k, m or g (powers of 1024)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}
