//! A time-series model's clauses (`ORDER BY`, `GROUP BY`, `WINDOW`, `HORIZON`), read from the
//! options `CREATE MODEL` stored them in and checked when the model is created: the built-in
//! engine then forecasts instead of predicting row by row.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The most past rows a forecast may read: each is a feature of every training example.
pub(crate) const MAX_WINDOW: u64 = 512;
/// The most future rows per group a forecast may make: each is an output row per group and a
/// training example per observed row.
pub(crate) const MAX_HORIZON: u64 = 1_000;

/// What a time-series model forecasts from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct SeriesOptions {
    /// The column that orders each series (a date, a timestamp or a number).
    pub(crate) order: String,
    /// The columns whose values tell the series apart; none for one series.
    pub(crate) groups: Vec<String>,
    /// How many past values each forecast reads.
    pub(crate) window: usize,
    /// How many future rows each group gets.
    pub(crate) horizon: usize,
}

impl SeriesOptions {
    /// The clauses in `using`, or `None` for a model without `ORDER BY`; an error names the
    /// clause that is wrong (a GROUP BY, WINDOW or HORIZON without ORDER BY, two ORDER BY
    /// columns, a WINDOW or HORIZON out of range, a missing WINDOW).
    pub(crate) fn from_using(using: &Map<String, Value>) -> Result<Option<SeriesOptions>> {
        let names = |key: &str| -> Result<Vec<String>> {
            match using.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::String(name)) => Ok(vec![name.clone()]),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| {
                        item.as_str().map(str::to_owned).ok_or_else(|| {
                            Error::invalid(format!("'{key}' must list column names; got {item}"))
                        })
                    })
                    .collect(),
                Some(other) => Err(Error::invalid(format!(
                    "'{key}' must list column names; got {other}"
                ))),
            }
        };
        let count = |key: &str, clause: &str, max: u64| -> Result<Option<usize>> {
            match using.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(value) => match value.as_u64() {
                    Some(n @ 1..) if n <= max => Ok(Some(n as usize)),
                    _ => Err(Error::invalid(format!(
                        "{clause} must be a whole number from 1 to {max}; got {value}"
                    ))),
                },
            }
        };
        let order = names("order_by")?;
        let groups = names("group_by")?;
        let window = count("window", "WINDOW", MAX_WINDOW)?;
        let horizon = count("horizon", "HORIZON", MAX_HORIZON)?;
        let order = match order.as_slice() {
            [] if groups.is_empty() && window.is_none() && horizon.is_none() => return Ok(None),
            [] => {
                return Err(Error::invalid(
                    "GROUP BY, WINDOW and HORIZON make a time-series model, which needs ORDER BY the column that orders each series",
                ))
            }
            [one] => one.clone(),
            _ => {
                return Err(Error::invalid(format!(
                    "a time-series model is ordered by one column; ORDER BY names {}",
                    order.join(", ")
                )))
            }
        };
        let window = window.ok_or_else(|| {
            Error::invalid(
                "a time-series model needs WINDOW n: how many past rows each forecast reads",
            )
        })?;
        Ok(Some(SeriesOptions {
            order,
            groups,
            window,
            horizon: horizon.unwrap_or(1),
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn options(value: Value) -> Result<Option<SeriesOptions>> {
        SeriesOptions::from_using(value.as_object().unwrap())
    }

    #[test]
    fn clauses_are_read_and_checked() {
        assert_eq!(options(json!({"engine": "lightwood"})).unwrap(), None);
        let read =
            options(json!({"order_by": ["d"], "group_by": ["g", "h"], "window": 10, "horizon": 3}))
                .unwrap()
                .unwrap();
        assert_eq!(
            read,
            SeriesOptions {
                order: "d".into(),
                groups: vec!["g".into(), "h".into()],
                window: 10,
                horizon: 3
            }
        );
        let one = options(json!({"order_by": "d", "window": 2}))
            .unwrap()
            .unwrap();
        assert_eq!((one.horizon, one.groups.len()), (1, 0));
        for (bad, says) in [
            (json!({"window": 3}), "needs ORDER BY"),
            (
                json!({"order_by": ["a", "b"], "window": 3}),
                "ORDER BY names a, b",
            ),
            (json!({"order_by": ["d"]}), "needs WINDOW n"),
            (
                json!({"order_by": ["d"], "window": 0}),
                "WINDOW must be a whole number from 1 to 512",
            ),
            (
                json!({"order_by": ["d"], "window": 2, "horizon": 1001}),
                "HORIZON must be",
            ),
            (
                json!({"order_by": ["d"], "window": 2, "horizon": -1}),
                "HORIZON must be",
            ),
            (
                json!({"order_by": [1], "window": 2}),
                "'order_by' must list column names",
            ),
        ] {
            let message = options(bad.clone()).unwrap_err().to_string();
            assert!(message.contains(says), "{bad}: {message}");
        }
    }
}
