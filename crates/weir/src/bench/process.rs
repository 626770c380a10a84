//! What Linux's `/proc` says about this process: its CPU time and its memory.

/// A `kB` line of `/proc/self/status` (e.g. `VmHWM:`, the peak resident set), in bytes.
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// User plus system CPU time of this process so far, from `/proc/self/stat` (in clock ticks
/// of 1/100 s, Linux's `USER_HZ`).
pub fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| stat_cpu_seconds(&stat))
        .unwrap_or(0.0)
}

/// User plus system CPU seconds of a `stat` line of `/proc` (a process's or a thread's).
pub fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let mut fields = rest.split_whitespace().skip(11);
    let mut ticks = || fields.next()?.parse::<u64>().ok();
    let (user, system) = (ticks()?, ticks()?);
    Some((user + system) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_read_after_a_name_that_holds_spaces_and_parentheses() {
        let stat = "42 (q4 (x) #1) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 9 0";
        assert_eq!(stat_cpu_seconds(stat), Some(2.8));
        assert_eq!(stat_cpu_seconds("42 (cut) S 1 2"), None);
    }
}
