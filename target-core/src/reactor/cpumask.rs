//! Parsing of SPDK-style core masks: `0x3`, `3` (hex), `[0,1]`, `[0-3,6]`.

use std::collections::BTreeSet;

/// The largest core number a mask may name.
pub const MAX_CORES: usize = 1024;

/// Parses a core mask into the sorted list of core numbers it selects.
pub fn parse_cpumask(mask: &str) -> Result<Vec<usize>, String> {
    let m = mask.trim();
    if m.is_empty() {
        return Err("empty core mask".into());
    }
    let cores: BTreeSet<usize> = if let Some(list) = m.strip_prefix('[') {
        let list = list
            .strip_suffix(']')
            .ok_or_else(|| format!("core list '{mask}' lacks a closing ']'"))?;
        let mut set = BTreeSet::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (parse_core(a, mask)?, parse_core(b, mask)?),
                None => {
                    let c = parse_core(part, mask)?;
                    (c, c)
                }
            };
            if lo > hi {
                return Err(format!("core range '{part}' in '{mask}' is reversed"));
            }
            set.extend(lo..=hi);
        }
        set
    } else {
        let hex = m
            .strip_prefix("0x")
            .or_else(|| m.strip_prefix("0X"))
            .unwrap_or(m);
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("core mask '{mask}' is not hexadecimal"));
        }
        let mut set = BTreeSet::new();
        for (i, c) in hex.chars().rev().enumerate() {
            let nibble = c.to_digit(16).unwrap_or(0) as usize;
            for bit in 0..4 {
                if nibble & (1 << bit) != 0 {
                    let core = i * 4 + bit;
                    if core >= MAX_CORES {
                        return Err(format!(
                            "core mask '{mask}' names core {core} ≥ {MAX_CORES}"
                        ));
                    }
                    set.insert(core);
                }
            }
        }
        set
    };
    if cores.is_empty() {
        return Err(format!("core mask '{mask}' selects no core"));
    }
    Ok(cores.into_iter().collect())
}

fn parse_core(s: &str, mask: &str) -> Result<usize, String> {
    let c: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' in core list '{mask}' is not a number"))?;
    if c >= MAX_CORES {
        return Err(format!("core {c} in '{mask}' is ≥ {MAX_CORES}"));
    }
    Ok(c)
}

/// Formats cores as an SPDK hex mask (`0x3`).
pub fn format_cpumask(cores: &[usize]) -> String {
    let top = cores.iter().copied().max().unwrap_or(0);
    let mut nibbles = vec![0u8; top / 4 + 1];
    for &c in cores {
        nibbles[c / 4] |= 1 << (c % 4);
    }
    let hex: String = nibbles
        .iter()
        .rev()
        .map(|n| char::from_digit(u32::from(*n), 16).unwrap_or('0'))
        .collect();
    match hex.trim_start_matches('0') {
        "" => "0x0".to_string(),
        s => format!("0x{s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_masks() {
        assert_eq!(parse_cpumask("0x3").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpumask("3").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpumask("0xF0").unwrap(), vec![4, 5, 6, 7]);
        assert_eq!(parse_cpumask("0x100").unwrap(), vec![8]);
        assert!(parse_cpumask("0x0").is_err());
        assert!(parse_cpumask("0xg").is_err());
        assert!(parse_cpumask("").is_err());
        assert!(parse_cpumask("0x").is_err());
    }

    #[test]
    fn list_masks() {
        assert_eq!(parse_cpumask("[0,1]").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpumask("[0-3,6]").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpumask("[ 2 ]").unwrap(), vec![2]);
        assert!(parse_cpumask("[3-1]").is_err());
        assert!(parse_cpumask("[a]").is_err());
        assert!(parse_cpumask("[1").is_err());
        assert!(parse_cpumask("[]").is_err());
        assert!(parse_cpumask("[5000]").is_err());
    }

    #[test]
    fn format_round_trips() {
        assert_eq!(format_cpumask(&[0, 1]), "0x3");
        assert_eq!(format_cpumask(&[8]), "0x100");
        assert_eq!(format_cpumask(&[0]), "0x1");
        for m in ["0x3", "0xf0", "0x1", "0x101"] {
            assert_eq!(format_cpumask(&parse_cpumask(m).unwrap()), m);
        }
    }
}
