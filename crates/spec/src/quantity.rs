//! Numbers written the way vLLM's command line writes them.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `max_model_len`: a token count, or `auto` (also written `-1`), which asks
/// the engine to fit the window to the KV memory it has left.
///
/// A count below -1 loads so that the field check can name it; zero, a
/// fraction, or a value too large to hold fails to load, as vLLM's argument
/// parser fails (`vllm/engine/arg_utils.py`, `human_readable_int_or_auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxModelLen {
    Auto,
    Tokens(i64),
}

impl Serialize for MaxModelLen {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MaxModelLen::Auto => serializer.serialize_str("auto"),
            MaxModelLen::Tokens(n) => serializer.serialize_i64(*n),
        }
    }
}

/// Parses a human-readable integer as vLLM does (`human_readable_int` in
/// `vllm/engine/arg_utils.py`): lowercase k/m/g/t multiply by powers of 1000
/// and accept a decimal fraction (`25.6k` is 25,600, truncated toward zero);
/// uppercase K/M/G/T multiply by powers of 1024 and refuse a fraction; a plain
/// number is a whole number with an optional sign and `_` digit separators,
/// as Python's `int()` accepts.
pub fn parse_human_int(text: &str) -> Result<i64, String> {
    let value = text.trim();
    let Some(last) = value.chars().last() else {
        return Err("is empty".to_string());
    };
    let (number, suffix) = if last.is_ascii_alphabetic() {
        (&value[..value.len() - 1], Some(last))
    } else {
        (value, None)
    };
    match suffix {
        None => parse_plain_int(number),
        Some(suffix) => {
            let (mult_decimal, mult_binary): (f64, i64) = match suffix.to_ascii_lowercase() {
                'k' => (1e3, 1 << 10),
                'm' => (1e6, 1 << 20),
                'g' => (1e9, 1 << 30),
                't' => (1e12, 1 << 40),
                _ if !is_unsigned_decimal(number) => {
                    return Err(format!(
                        "`{value}` is not a whole number, auto, or a number with a k/m/g/t or K/M/G/T suffix"
                    ));
                }
                _ => {
                    return Err(format!(
                        "`{value}` has an unknown suffix `{suffix}`; use k/m/g/t or K/M/G/T"
                    ));
                }
            };
            if !is_unsigned_decimal(number) {
                return Err(format!(
                    "`{value}` is not a number followed by a k/m/g/t or K/M/G/T suffix"
                ));
            }
            if suffix.is_ascii_lowercase() {
                let parsed: f64 = number
                    .parse()
                    .map_err(|_| format!("`{number}` is not a number"))?;
                let product = parsed * mult_decimal;
                if !product.is_finite() || product >= 9.223_372_036_854_775e18 {
                    return Err(format!("`{value}` is too large to hold"));
                }
                // Python's int() truncates toward zero.
                Ok(product.trunc() as i64)
            } else {
                if number.contains('.') {
                    return Err(format!(
                        "decimals are not allowed with binary suffixes like {suffix}; did you mean {number}{}?",
                        suffix.to_ascii_lowercase()
                    ));
                }
                let parsed: i64 = number
                    .parse()
                    .map_err(|_| format!("`{value}` is too large to hold"))?;
                parsed
                    .checked_mul(mult_binary)
                    .ok_or_else(|| format!("`{value}` is too large to hold"))
            }
        }
    }
}

fn is_unsigned_decimal(text: &str) -> bool {
    let mut parts = text.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next();
    !whole.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.is_none_or(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()))
}

fn parse_plain_int(text: &str) -> Result<i64, String> {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1i64, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let well_formed = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_')
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__");
    if !well_formed {
        return Err(format!("`{text}` is not a whole number"));
    }
    let cleaned: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude: i64 = cleaned
        .parse()
        .map_err(|_| format!("`{text}` is too large to hold"))?;
    Ok(sign * magnitude)
}

impl MaxModelLen {
    fn from_int(value: i64) -> Result<MaxModelLen, String> {
        match value {
            -1 => Ok(MaxModelLen::Auto),
            0 => Err(
                "comes to zero; omit the key for the model's whole window, or write `auto`"
                    .to_string(),
            ),
            n => Ok(MaxModelLen::Tokens(n)),
        }
    }

    pub fn parse(text: &str) -> Result<MaxModelLen, String> {
        if text.trim() == "auto" {
            return Ok(MaxModelLen::Auto);
        }
        MaxModelLen::from_int(parse_human_int(text)?)
    }
}

impl<'de> Deserialize<'de> for MaxModelLen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MaxModelLenVisitor;
        impl Visitor<'_> for MaxModelLenVisitor {
            type Value = MaxModelLen;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(
                    f,
                    "a whole number of tokens, `auto`, -1, or a number with a k/m/g/t or K/M/G/T suffix"
                )
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<MaxModelLen, E> {
                MaxModelLen::from_int(value).map_err(|m| E::custom(format!("max_model_len {m}")))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<MaxModelLen, E> {
                let value = i64::try_from(value).map_err(|_| {
                    E::custom(format!("max_model_len {value} is too large to hold"))
                })?;
                self.visit_i64(value)
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<MaxModelLen, E> {
                Err(E::custom(format!(
                    "max_model_len {} is not a whole number",
                    crate::problem::number(value)
                )))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<MaxModelLen, E> {
                MaxModelLen::parse(value).map_err(|m| E::custom(format!("max_model_len {m}")))
            }
        }
        deserializer.deserialize_any(MaxModelLenVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::{MaxModelLen, parse_human_int};

    #[test]
    fn suffixes_follow_vllm() {
        assert_eq!(parse_human_int("1k"), Ok(1000));
        assert_eq!(parse_human_int("1K"), Ok(1024));
        assert_eq!(parse_human_int("25.6k"), Ok(25600));
        assert_eq!(parse_human_int("2M"), Ok(2 * 1024 * 1024));
        assert_eq!(parse_human_int("1t"), Ok(1_000_000_000_000));
        assert_eq!(parse_human_int(" 128k "), Ok(128_000));
        assert_eq!(parse_human_int("1_000"), Ok(1000));
        assert!(
            parse_human_int("1.5K")
                .unwrap_err()
                .contains("did you mean 1.5k")
        );
        assert!(parse_human_int("1x").is_err());
        assert!(parse_human_int("k").is_err());
        assert!(parse_human_int("-1k").is_err());
        assert!(parse_human_int("99999999999T").is_err());
        assert!(parse_human_int("1e3").is_err());
    }

    #[test]
    fn auto_and_minus_one_are_the_same_request() {
        assert_eq!(MaxModelLen::parse("auto"), Ok(MaxModelLen::Auto));
        assert_eq!(MaxModelLen::parse("-1"), Ok(MaxModelLen::Auto));
        assert_eq!(MaxModelLen::parse("-5"), Ok(MaxModelLen::Tokens(-5)));
        assert!(MaxModelLen::parse("0k").is_err());
        assert!(MaxModelLen::parse("0.0001k").is_err());
    }
}
