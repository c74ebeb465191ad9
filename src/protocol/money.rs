//! Money as OCX counts it (issue 48): a runner page's `prices` per
//! million model tokens and a record's `budget.cost`, both in the page's
//! currency. Every amount is held as a whole number of micro-units (a
//! millionth of the currency), read exactly from the decimal it was
//! written as, so a run's cost reckoned from its tokens never drifts as a
//! float's sum would; a cost is rounded up to the next micro-unit, never
//! down.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Micro-units in one unit of a currency.
const MICRO: u64 = 1_000_000;
/// Tokens a price is given for.
const PER: u128 = 1_000_000;
/// The largest amount read, in micro-units (999,999,999.999999): fifteen
/// significant digits, the most a JSON number (a float) carries exactly.
pub const MAX: u64 = 999_999_999_999_999;

/// An amount of money in micro-units of a currency; written in JSON as a
/// decimal number of at most six places, never negative, read up to [`MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Money(pub u64);

/// Why a number is no amount of money.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotMoney {
    /// It is below zero.
    #[error("{0} is negative: give an amount of 0 or more")]
    Negative(String),
    /// It has more than six decimal places.
    #[error("{0} has more than six decimal places: a millionth is the smallest amount counted")]
    TooFine(String),
    /// It is larger than [`MAX`].
    #[error("{0} is too large: at most 999999999.999999")]
    TooLarge(String),
    /// It is not a decimal number.
    #[error("{0} is not a decimal number")]
    NotDecimal(String),
}

impl Money {
    /// `text`, a decimal number as JSON writes one (digits, an optional
    /// point and at most six more digits), in micro-units; or why not.
    pub fn parse(text: &str) -> Result<Money, NotMoney> {
        if text.starts_with('-') {
            return Err(NotMoney::Negative(text.into()));
        }
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) {
            return Err(NotMoney::NotDecimal(text.into()));
        }
        let fraction = fraction.trim_end_matches('0');
        if fraction.len() > 6 {
            return Err(NotMoney::TooFine(text.into()));
        }
        let too_large = || NotMoney::TooLarge(text.into());
        let units: u64 = whole.parse().map_err(|_| too_large())?;
        let micros: u64 = format!("{fraction:0<6}").parse().unwrap_or(0);
        units
            .checked_mul(MICRO)
            .and_then(|u| u.checked_add(micros))
            .filter(|m| *m <= MAX)
            .map(Money)
            .ok_or_else(too_large)
    }

    /// Whether it is nothing.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// The amount as a person reads it: at least two decimal places, and as
/// many more as it needs (0.42, 2.50, 0.000123).
impl std::fmt::Display for Money {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fraction = format!("{:06}", self.0 % MICRO);
        let trimmed = fraction.trim_end_matches('0');
        let shown = &fraction[..trimmed.len().max(2)];
        write!(f, "{}.{shown}", self.0 / MICRO)
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Exact up to MAX: the quotient of two exact floats is the float
        // nearest the decimal, and a float carries fifteen significant
        // digits, so it reads back as the same decimal. (A cost reckoned
        // past MAX is shown exactly by Display, written here as near.)
        s.serialize_f64(self.0 as f64 / MICRO as f64)
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Money, D::Error> {
        struct Amount;
        impl serde::de::Visitor<'_> for Amount {
            type Value = Money;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an amount of money, a decimal number")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Money, E> {
                Money::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Money, E> {
                Money::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Money, E> {
                // A float's Display is the shortest decimal that reads back
                // as it: the decimal the JSON held, for any of at most 15
                // significant digits.
                Money::parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(Amount)
    }
}

/// A runner page's prices for its model service's tokens: in `currency`,
/// per million tokens in and per million out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// The currency, as ISO 4217 writes it (three capital letters: USD, EUR).
    pub currency: String,
    /// A million tokens in (cache reads and writes priced as any other).
    pub input: Money,
    /// A million tokens out.
    pub output: Money,
}

impl Prices {
    /// What `input` tokens in and `output` out cost, rounded up to a
    /// micro-unit.
    pub fn cost(&self, input: u64, output: u64) -> Money {
        let micro_per = u128::from(input) * u128::from(self.input.0)
            + u128::from(output) * u128::from(self.output.0);
        Money(u64::try_from(micro_per.div_ceil(PER)).unwrap_or(u64::MAX))
    }

    /// `amount` with the currency: `0.42 USD`.
    pub fn amount(&self, amount: Money) -> String {
        format!("{amount} {}", self.currency)
    }

    /// Why `currency` is no ISO 4217 code, if it is none.
    pub fn currency_refused(&self) -> Option<String> {
        let c = &self.currency;
        let iso = c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase());
        (!iso).then(|| format!("{c:?} is not a currency's code: three capital letters, as USD"))
    }
}

/// What a run has cost, beside its budget when it has one, in `currency`:
/// `0.0123 of 0.05 USD`, or `0.0123 USD`.
pub fn cost_words(spent: Money, budget: Option<Money>, currency: &str) -> String {
    match budget {
        Some(b) => format!("{spent} of {b} {currency}"),
        None => format!("{spent} {currency}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn amounts_are_read_exactly_or_refused_saying_why() {
        for (text, micros) in [
            ("0", 0),
            ("3", 3_000_000),
            ("0.42", 420_000),
            ("0.000001", 1),
            ("15.0", 15_000_000),
            ("0.10000000", 100_000),
        ] {
            assert_eq!(Money::parse(text), Ok(Money(micros)), "{text}");
        }
        assert!(matches!(Money::parse("-1"), Err(NotMoney::Negative(_))));
        assert!(matches!(
            Money::parse("0.0000001"),
            Err(NotMoney::TooFine(_))
        ));
        for large in ["99999999999999999999", "1000000000"] {
            assert!(
                matches!(Money::parse(large), Err(NotMoney::TooLarge(_))),
                "{large}"
            );
        }
        assert_eq!(Money::parse("999999999.999999"), Ok(Money(MAX)));
        for bad in ["", ".5", "1e3", "x", "1.2.3"] {
            assert!(
                matches!(Money::parse(bad), Err(NotMoney::NotDecimal(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn json_numbers_read_as_written_and_others_are_refused() {
        let read = |j: &str| serde_json::from_str::<Money>(j).map_err(|e| e.to_string());
        assert_eq!(read("0.1"), Ok(Money(100_000)));
        assert_eq!(read("3"), Ok(Money(3_000_000)));
        assert_eq!(read("0.075"), Ok(Money(75_000)));
        assert!(read("-0.5").unwrap_err().contains("negative"));
        assert!(read("-2").unwrap_err().contains("negative"));
        assert!(read("\"1\"").is_err());
        assert!(read("1e-7").unwrap_err().contains("six decimal places"));
        assert_eq!(serde_json::to_string(&Money(2_500_000)).unwrap(), "2.5");
    }

    #[test]
    fn an_amount_is_shown_with_two_places_at_least() {
        assert_eq!(Money(420_000).to_string(), "0.42");
        assert_eq!(Money(2_500_000).to_string(), "2.50");
        assert_eq!(Money(123).to_string(), "0.000123");
        assert_eq!(Money(0).to_string(), "0.00");
        assert_eq!(Money(12_345_678).to_string(), "12.345678");
    }

    #[test]
    fn a_cost_is_reckoned_from_tokens_and_rounded_up() {
        let p = Prices {
            currency: "USD".into(),
            input: Money(3_000_000),
            output: Money(15_000_000),
        };
        assert_eq!(p.cost(1_000_000, 0), Money(3_000_000));
        assert_eq!(p.cost(18_000, 420), Money(60_300));
        assert_eq!(p.cost(1, 0), Money(3));
        let cheap = Prices {
            input: Money(75_000),
            ..p.clone()
        };
        assert_eq!(
            cheap.cost(1, 0),
            Money(1),
            "a part of a micro-unit is counted whole"
        );
        assert_eq!(p.amount(Money(420_000)), "0.42 USD");
        assert_eq!(p.cost(u64::MAX, u64::MAX), Money(u64::MAX));
        assert!(p.currency_refused().is_none());
        for bad in ["usd", "US", "DOLLARS", ""] {
            let q = Prices {
                currency: bad.into(),
                ..p.clone()
            };
            assert!(q.currency_refused().is_some(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_amount_written_reads_back_the_same(micros in 0u64..=MAX) {
            let text = serde_json::to_string(&Money(micros)).unwrap();
            prop_assert_eq!(serde_json::from_str::<Money>(&text).unwrap(), Money(micros));
            prop_assert_eq!(Money::parse(&Money(micros).to_string()), Ok(Money(micros)));
        }

        #[test]
        fn a_cost_summed_in_parts_is_the_whole_or_a_micro_unit_more(
            a in 0u64..1_000_000, b in 0u64..1_000_000, c in 0u64..1_000_000, d in 0u64..1_000_000,
            pin in 0u64..100_000_000, pout in 0u64..100_000_000,
        ) {
            let p = Prices { currency: "EUR".into(), input: Money(pin), output: Money(pout) };
            let (whole, parts) = (p.cost(a + c, b + d).0, p.cost(a, b).0 + p.cost(c, d).0);
            prop_assert!(whole <= parts && parts <= whole + 1, "{whole} {parts}");
        }
    }
}
