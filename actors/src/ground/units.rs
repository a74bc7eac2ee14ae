//! Units the configuration and the budgets speak: byte sizes and memory limits.

use std::fmt;

use serde::{de, Deserialize, Deserializer};

/// A number of bytes; in TOML an integer or a string with a unit
/// ("512MiB", "64GiB", "1.5 GB").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (u, n) in UNITS {
            if self.0 >= n {
                return write!(f, "{:.2} {u}", self.0 as f64 / n as f64);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            "t" | "tb" => 1_000_000_000_000,
            "tib" => 1 << 40,
            u => return Err(format!("unknown size unit `{u}` in `{s}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
        };
        let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a size (expected e.g. \"64GiB\")"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("`{s}` is not a non-negative size"));
        }
        Ok(ByteSize((v * mult as f64) as u64))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative byte count or a size string like \"64GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom(format!("size must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A memory budget: a size or "auto".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// Derived from the machine (see the section's docs).
    Auto,
    Bytes(ByteSize),
}

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = MemoryLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"auto\", a non-negative byte count, or a size string like \"64GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MemoryLimit, E> {
                Ok(MemoryLimit::Bytes(ByteSize(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemoryLimit, E> {
                u64::try_from(v)
                    .map(|b| MemoryLimit::Bytes(ByteSize(b)))
                    .map_err(|_| E::custom(format!("budget must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryLimit, E> {
                if v.trim().eq_ignore_ascii_case("auto") {
                    Ok(MemoryLimit::Auto)
                } else {
                    v.parse().map(MemoryLimit::Bytes).map_err(E::custom)
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("64GiB".parse::<ByteSize>().unwrap().0, 64 << 30);
        assert_eq!("1.5 GB".parse::<ByteSize>().unwrap().0, 1_500_000_000);
        assert_eq!("100".parse::<ByteSize>().unwrap().0, 100);
        assert!("12 parsecs".parse::<ByteSize>().unwrap_err().contains("unit"));
    }
}
