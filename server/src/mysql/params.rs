//! A prepared statement's parameters as the binary protocol sends them, as values for the
//! engine to bind: numbers and texts as JSON values, dates, timestamps, decimals and bytes as
//! typed ones, so `WHERE day = ?` compares a date with a date.

use mindlite::{Error, PositionalValue, TypedParam};
use opensrv_mysql::{ColumnType, ParamParser, ValueInner};

/// The values the client sent, in order. opensrv-mysql decodes them as they are iterated and
/// panics on a malformed packet (a type byte it does not know, values shorter than their
/// types): that is the client's error here, not the connection's end.
pub(super) fn values(params: ParamParser<'_>) -> Result<Vec<PositionalValue>, Error> {
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        params
            .into_iter()
            .map(|param| value(param.coltype, param.value.into_inner()))
            .collect::<Result<Vec<_>, Error>>()
    }));
    decoded.unwrap_or_else(|_| {
        Err(Error::invalid(
            "The statement's parameters are malformed (COM_STMT_EXECUTE)",
        ))
    })
}

fn value(coltype: ColumnType, value: ValueInner<'_>) -> Result<PositionalValue, Error> {
    use serde_json::Value as Json;
    Ok(match value {
        ValueInner::NULL => PositionalValue::Json(Json::Null),
        ValueInner::Int(i) => PositionalValue::Json(Json::from(i)),
        ValueInner::UInt(u) => PositionalValue::Json(Json::from(u)),
        ValueInner::Double(f) => match serde_json::Number::from_f64(f) {
            Some(number) => PositionalValue::Json(Json::Number(number)),
            None => {
                return Err(Error::invalid(format!(
                    "A parameter is {f}, which SQL has no literal for"
                )))
            }
        },
        ValueInner::Bytes(bytes) => match coltype {
            ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => {
                PositionalValue::Typed(TypedParam::Decimal(text(bytes)?))
            }
            ColumnType::MYSQL_TYPE_TINY_BLOB
            | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
            | ColumnType::MYSQL_TYPE_LONG_BLOB
            | ColumnType::MYSQL_TYPE_BLOB
            | ColumnType::MYSQL_TYPE_BIT
            | ColumnType::MYSQL_TYPE_GEOMETRY => match std::str::from_utf8(bytes) {
                // Clients send text as blobs too (Connector/Python does): text stays text.
                Ok(text) => PositionalValue::Json(Json::String(text.to_string())),
                Err(_) => PositionalValue::Typed(TypedParam::Bytes(bytes.to_vec())),
            },
            // Clients send bytes as strings too (Connector/Python does): bytes that are no
            // text stay bytes.
            _ => match std::str::from_utf8(bytes) {
                Ok(text) => PositionalValue::Json(Json::String(text.to_string())),
                Err(_) => PositionalValue::Typed(TypedParam::Bytes(bytes.to_vec())),
            },
        },
        ValueInner::Date(bytes) | ValueInner::Datetime(bytes) => {
            let (date, time) = date_time(bytes)?;
            match (coltype, time) {
                (ColumnType::MYSQL_TYPE_DATE, _) | (_, None) => {
                    PositionalValue::Typed(TypedParam::Date(date))
                }
                (_, Some(time)) => {
                    PositionalValue::Typed(TypedParam::Timestamp(format!("{date} {time}")))
                }
            }
        }
        ValueInner::Time(bytes) => PositionalValue::Json(Json::String(time(bytes)?)),
    })
}

fn text(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::invalid("A text parameter is not UTF-8"))
}

fn malformed(what: &str) -> Error {
    Error::invalid(format!("A {what} parameter is malformed"))
}

/// A binary DATE/DATETIME: length 0, 4 (date), 7 (and time) or 11 (and microseconds).
fn date_time(bytes: &[u8]) -> Result<(String, Option<String>), Error> {
    let (year, month, day) = match bytes.len() {
        0 => return Ok(("0000-00-00".to_string(), None)),
        4 | 7 | 11 => (u16::from_le_bytes([bytes[0], bytes[1]]), bytes[2], bytes[3]),
        _ => return Err(malformed("date")),
    };
    let date = format!("{year:04}-{month:02}-{day:02}");
    let time = match bytes.len() {
        7 => Some(format!("{:02}:{:02}:{:02}", bytes[4], bytes[5], bytes[6])),
        11 => {
            let micros = u32::from_le_bytes([bytes[7], bytes[8], bytes[9], bytes[10]]);
            Some(format!(
                "{:02}:{:02}:{:02}.{micros:06}",
                bytes[4], bytes[5], bytes[6]
            ))
        }
        _ => None,
    };
    Ok((date, time))
}

/// A binary TIME: length 0, 8 or 12: sign, days, hours, minutes, seconds, microseconds.
fn time(bytes: &[u8]) -> Result<String, Error> {
    match bytes.len() {
        0 => Ok("00:00:00".to_string()),
        8 | 12 => {
            let negative = bytes[0] == 1;
            let days = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
            let hours = days as u64 * 24 + bytes[5] as u64;
            let mut shown = format!(
                "{}{hours:02}:{:02}:{:02}",
                if negative { "-" } else { "" },
                bytes[6],
                bytes[7]
            );
            if bytes.len() == 12 {
                let micros = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
                shown.push_str(&format!(".{micros:06}"));
            }
            Ok(shown)
        }
        _ => Err(malformed("time")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_dates_and_times_read_as_sql_literals() {
        assert_eq!(
            date_time(&[0xE8, 0x07, 1, 31]).unwrap(),
            ("2024-01-31".to_string(), None)
        );
        let at = [0xE8, 0x07, 2, 29, 13, 5, 9, 0x40, 0xE2, 0x01, 0x00];
        assert_eq!(
            date_time(&at).unwrap(),
            (
                "2024-02-29".to_string(),
                Some("13:05:09.123456".to_string())
            )
        );
        assert!(date_time(&[1, 2, 3]).is_err());
        assert_eq!(time(&[1, 1, 0, 0, 0, 2, 3, 4]).unwrap(), "-26:03:04");
        assert!(time(&[0; 5]).is_err());
    }
}
