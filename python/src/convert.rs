//! Values across the boundary: Arrow cells to Python objects (`int`, `float`, `str`, `bytes`,
//! `bool`, `None`, `datetime.date`/`datetime`/`time`/`timedelta`, `decimal.Decimal`, lists and
//! dicts for nested types) and Python parameters to the engine's JSON and typed values.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type, DurationMicrosecondType,
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    Time64MicrosecondType, TimeUnit, TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::{Datelike, NaiveDate, Timelike};
use mindlite::{QueryRequest, TypedParam};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use pyo3::IntoPyObjectExt;

use crate::{DataError, InterfaceError};

/// The Python classes results are made of; looked up once per fetch. The limited API has no
/// direct constructors for them, so they are called like any class.
pub(crate) struct PyTypes<'py> {
    date: Bound<'py, PyAny>,
    datetime: Bound<'py, PyAny>,
    time: Bound<'py, PyAny>,
    timedelta: Bound<'py, PyAny>,
    decimal: Bound<'py, PyAny>,
    utc: Bound<'py, PyAny>,
    memoryview: Bound<'py, PyAny>,
}

impl<'py> PyTypes<'py> {
    pub(crate) fn import(py: Python<'py>) -> PyResult<Self> {
        let datetime = py.import("datetime")?;
        Ok(PyTypes {
            date: datetime.getattr("date")?,
            datetime: datetime.getattr("datetime")?,
            time: datetime.getattr("time")?,
            timedelta: datetime.getattr("timedelta")?,
            decimal: py.import("decimal")?.getattr("Decimal")?,
            utc: datetime.getattr("timezone")?.getattr("utc")?,
            memoryview: py.import("builtins")?.getattr("memoryview")?,
        })
    }
}

/// Rows `from..to` of `batch` as tuples.
pub(crate) fn rows<'py>(
    py: Python<'py>,
    types: &PyTypes<'py>,
    batch: &RecordBatch,
    from: usize,
    to: usize,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let columns = batch
        .columns()
        .iter()
        .map(|column| values(py, types, column, from, to))
        .collect::<PyResult<Vec<_>>>()?;
    let mut cells: Vec<_> = columns.into_iter().map(Vec::into_iter).collect();
    (from..to)
        .map(|_| PyTuple::new(py, cells.iter_mut().map(|c| c.next())))
        .collect()
}

/// A Python `ValueError` or `OverflowError` from building a value (a year past 9999, a time of
/// day past 24 h) as PEP 249's DataError; other errors as they are.
pub(crate) fn value_error(py: Python<'_>, err: PyErr) -> PyErr {
    if err.is_instance_of::<pyo3::exceptions::PyValueError>(py)
        || err.is_instance_of::<pyo3::exceptions::PyOverflowError>(py)
    {
        DataError::new_err(format!(
            "a value has no Python equivalent: {}",
            err.value(py)
        ))
    } else {
        err
    }
}

/// `array` as `to`; a value that does not fit is a DataError, never a silent NULL.
fn cast(array: &ArrayRef, to: &DataType) -> PyResult<ArrayRef> {
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(array, to, &options).map_err(|e| DataError::new_err(e.to_string()))
}

fn none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

/// Cells `from..to` of `array` as Python objects.
fn values<'py>(
    py: Python<'py>,
    types: &PyTypes<'py>,
    array: &ArrayRef,
    from: usize,
    to: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    // Each cell, or None where the array is null.
    fn each<'py>(
        py: Python<'py>,
        array: &dyn Array,
        from: usize,
        to: usize,
        mut cell: impl FnMut(usize) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        (from..to)
            .map(|i| {
                if array.is_null(i) {
                    Ok(none(py))
                } else {
                    cell(i)
                }
            })
            .collect()
    }
    macro_rules! numbers {
        ($t:ty) => {{
            let a = array.as_primitive::<$t>();
            each(py, a, from, to, |i| a.value(i).into_bound_py_any(py))
        }};
    }
    let a = array.as_ref();
    match array.data_type() {
        DataType::Null => Ok((from..to).map(|_| none(py)).collect()),
        DataType::Boolean => {
            let b = array.as_boolean();
            each(py, a, from, to, |i| b.value(i).into_bound_py_any(py))
        }
        DataType::Int8 => numbers!(Int8Type),
        DataType::Int16 => numbers!(Int16Type),
        DataType::Int32 => numbers!(Int32Type),
        DataType::Int64 => numbers!(Int64Type),
        DataType::UInt8 => numbers!(UInt8Type),
        DataType::UInt16 => numbers!(UInt16Type),
        DataType::UInt32 => numbers!(UInt32Type),
        DataType::UInt64 => numbers!(UInt64Type),
        DataType::Float32 => numbers!(Float32Type),
        DataType::Float64 => numbers!(Float64Type),
        DataType::Float16 => {
            let f = array.as_primitive::<Float16Type>();
            each(py, a, from, to, |i| {
                f.value(i).to_f64().into_bound_py_any(py)
            })
        }
        DataType::Utf8 => {
            let s = array.as_string::<i32>();
            each(py, a, from, to, |i| s.value(i).into_bound_py_any(py))
        }
        DataType::LargeUtf8 => {
            let s = array.as_string::<i64>();
            each(py, a, from, to, |i| s.value(i).into_bound_py_any(py))
        }
        DataType::Utf8View => {
            let s = array.as_string_view();
            each(py, a, from, to, |i| s.value(i).into_bound_py_any(py))
        }
        DataType::Binary => {
            let b = array.as_binary::<i32>();
            each(py, a, from, to, |i| {
                Ok(PyBytes::new(py, b.value(i)).into_any())
            })
        }
        DataType::LargeBinary => {
            let b = array.as_binary::<i64>();
            each(py, a, from, to, |i| {
                Ok(PyBytes::new(py, b.value(i)).into_any())
            })
        }
        DataType::BinaryView => {
            let b = array.as_binary_view();
            each(py, a, from, to, |i| {
                Ok(PyBytes::new(py, b.value(i)).into_any())
            })
        }
        DataType::FixedSizeBinary(_) => {
            let b = array.as_fixed_size_binary();
            each(py, a, from, to, |i| {
                Ok(PyBytes::new(py, b.value(i)).into_any())
            })
        }
        DataType::Decimal128(_, _) => {
            let d = array.as_primitive::<Decimal128Type>();
            each(py, a, from, to, |i| {
                types.decimal.call1((d.value_as_string(i),))
            })
        }
        DataType::Decimal256(_, _) => {
            let d = array.as_primitive::<Decimal256Type>();
            each(py, a, from, to, |i| {
                types.decimal.call1((d.value_as_string(i),))
            })
        }
        DataType::Date32 => {
            let d = array.as_primitive::<Date32Type>();
            each(py, a, from, to, |i| date(types, d.value_as_date(i)))
        }
        DataType::Date64 => {
            let d = array.as_primitive::<Date64Type>();
            each(py, a, from, to, |i| date(types, d.value_as_date(i)))
        }
        DataType::Timestamp(unit, zone) => {
            // Microseconds are Python's resolution; a zoned value is the same instant in UTC.
            let micros = if *unit == TimeUnit::Microsecond {
                Arc::clone(array)
            } else {
                cast(
                    array,
                    &DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
                )?
            };
            let t = micros.as_primitive::<TimestampMicrosecondType>();
            let zoned = zone.is_some();
            each(py, a, from, to, |i| {
                let Some(at) = chrono::DateTime::from_timestamp_micros(t.value(i)) else {
                    return Err(DataError::new_err("timestamp out of range"));
                };
                let at = at.naive_utc();
                let (date, time) = (at.date(), at.time());
                let args = (
                    date.year(),
                    date.month(),
                    date.day(),
                    time.hour(),
                    time.minute(),
                    time.second(),
                    time.nanosecond() / 1000,
                );
                if zoned {
                    let kwargs = PyDict::new(py);
                    kwargs.set_item("tzinfo", &types.utc)?;
                    types.datetime.call(args, Some(&kwargs))
                } else {
                    types.datetime.call1(args)
                }
            })
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let micros = cast(array, &DataType::Time64(TimeUnit::Microsecond))?;
            let t = micros.as_primitive::<Time64MicrosecondType>();
            each(py, a, from, to, |i| {
                let v = t.value(i);
                let seconds = v / 1_000_000;
                types.time.call1((
                    seconds / 3600,
                    seconds / 60 % 60,
                    seconds % 60,
                    v % 1_000_000,
                ))
            })
        }
        DataType::Duration(_) => {
            let micros = cast(array, &DataType::Duration(TimeUnit::Microsecond))?;
            let d = micros.as_primitive::<DurationMicrosecondType>();
            each(py, a, from, to, |i| {
                let kwargs = PyDict::new(py);
                kwargs.set_item("microseconds", d.value(i))?;
                types.timedelta.call((), Some(&kwargs))
            })
        }
        DataType::Dictionary(_, value_type) => {
            let plain = cast(array, value_type)?;
            values(py, types, &plain, from, to)
        }
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            each(py, a, from, to, |i| list(py, types, &l.value(i)))
        }
        DataType::LargeList(_) => {
            let l = array.as_list::<i64>();
            each(py, a, from, to, |i| list(py, types, &l.value(i)))
        }
        DataType::FixedSizeList(_, _) => {
            let l = array.as_fixed_size_list();
            each(py, a, from, to, |i| list(py, types, &l.value(i)))
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(|c| values(py, types, c, from, to))
                .collect::<PyResult<Vec<_>>>()?;
            each(py, a, from, to, |i| {
                let dict = PyDict::new(py);
                for (field, column) in fields.iter().zip(&columns) {
                    dict.set_item(field.name(), &column[i - from])?;
                }
                Ok(dict.into_any())
            })
        }
        _ => {
            // Intervals, maps, unions: their text, as the SQL shell shows them.
            let formatter = ArrayFormatter::try_new(a, &FormatOptions::default())
                .map_err(|e| DataError::new_err(e.to_string()))?;
            each(py, a, from, to, |i| {
                formatter.value(i).to_string().into_bound_py_any(py)
            })
        }
    }
}

fn list<'py>(
    py: Python<'py>,
    types: &PyTypes<'py>,
    items: &ArrayRef,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyList::new(py, values(py, types, items, 0, items.len())?)?.into_any())
}

fn date<'py>(types: &PyTypes<'py>, value: Option<NaiveDate>) -> PyResult<Bound<'py, PyAny>> {
    let value = value.ok_or_else(|| DataError::new_err("date out of range"))?;
    types.date.call1((value.year(), value.month(), value.day()))
}

/// Adds `params`, a mapping of parameter names to values, to `request`: `None`, `bool`, `int`,
/// `float` and `str` as JSON; `datetime.date`, `datetime.datetime` (zoned ones in UTC),
/// `decimal.Decimal` and bytes-like values typed; a list or tuple as the values of `IN :name`.
pub(crate) fn bind(mut request: QueryRequest, params: &Bound<'_, PyAny>) -> PyResult<QueryRequest> {
    let py = params.py();
    if params.is_instance_of::<PyList>() || params.is_instance_of::<PyTuple>() {
        return Err(InterfaceError::new_err(
            "paramstyle is 'named' (:name): pass params as a dict, not a sequence",
        ));
    }
    let items = match params.cast::<PyDict>() {
        Ok(dict) => dict.items().into_any(),
        Err(_) => params
            .call_method0("items")
            .map_err(|_| InterfaceError::new_err("params must be a mapping of names to values"))?,
    };
    let types = PyTypes::import(py)?;
    for item in items.try_iter()? {
        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let name: String = name
            .extract()
            .map_err(|_| InterfaceError::new_err("parameter names must be strings"))?;
        let name = name.strip_prefix(':').unwrap_or(&name).to_string();
        if is_nat(&types, &value)? {
            request = request.with_param(name, serde_json::Value::Null);
        } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            let list = value
                .try_iter()?
                .map(|v| json(&types, &name, &v?))
                .collect::<PyResult<Vec<_>>>()?;
            request = request.with_param(name, serde_json::Value::Array(list));
        } else if let Some(typed) = typed(&types, &name, &value)? {
            request = request.with_typed_param(name, typed);
        } else {
            let value = json(&types, &name, &value)?;
            request = request.with_param(name, value);
        }
    }
    Ok(request)
}

/// pandas' missing time (`NaT`), a `datetime` subclass that stands for NULL.
fn is_nat(types: &PyTypes<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(value.is_instance(&types.datetime)? && value.get_type().name()? == "NaTType")
}

/// A value JSON cannot carry, or `None` for the others.
fn typed(
    types: &PyTypes<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<Option<TypedParam>> {
    if value.is_instance(&types.datetime)? {
        let naive = if value.getattr("tzinfo")?.is_none() {
            value.clone()
        } else {
            let kwargs = PyDict::new(value.py());
            kwargs.set_item("tzinfo", value.py().None())?;
            value
                .call_method1("astimezone", (&types.utc,))?
                .call_method("replace", (), Some(&kwargs))?
        };
        let text: String = naive.call_method1("isoformat", (" ",))?.extract()?;
        return Ok(Some(TypedParam::Timestamp(text)));
    }
    if value.is_instance(&types.date)? {
        return Ok(Some(TypedParam::Date(
            value.call_method0("isoformat")?.extract()?,
        )));
    }
    if value.is_instance(&types.decimal)? {
        if !value.call_method0("is_finite")?.extract::<bool>()? {
            return Err(DataError::new_err(format!(
                "Parameter ':{name}' is {}: only finite decimals can be bound",
                value.str()?
            )));
        }
        let text: String = value.call_method1("__format__", ("f",))?.extract()?;
        return Ok(Some(TypedParam::Decimal(text)));
    }
    if value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
        || value.is_instance(&types.memoryview)?
    {
        let bytes: Vec<u8> = value
            .call_method0("__bytes__")
            .or_else(|_| {
                value
                    .py()
                    .import("builtins")?
                    .getattr("bytes")?
                    .call1((value,))
            })?
            .extract()?;
        return Ok(Some(TypedParam::Bytes(bytes)));
    }
    Ok(None)
}

/// A JSON-representable parameter value.
fn json(types: &PyTypes<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if value.is_none() {
        return Ok(serde_json::Value::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(serde_json::Value::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<i64>() {
            return Ok(n.into());
        }
        if let Ok(n) = value.extract::<u64>() {
            return Ok(n.into());
        }
        return Err(DataError::new_err(format!(
            "Parameter ':{name}' ({}) does not fit in 64 bits",
            value.str()?
        )));
    }
    if value.is_instance_of::<PyFloat>() {
        let f: f64 = value.extract()?;
        return serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| {
                DataError::new_err(format!(
                    "Parameter ':{name}' is {f}: only finite floats can be bound"
                ))
            });
    }
    if value.is_instance_of::<PyString>() {
        return Ok(serde_json::Value::String(value.extract()?));
    }
    // Inside a list, where only JSON values stand: dates and decimals as their text.
    if value.is_instance(&types.date)? || value.is_instance(&types.decimal)? {
        return Ok(serde_json::Value::String(value.str()?.extract()?));
    }
    Err(InterfaceError::new_err(format!(
        "Parameter ':{name}' has type {}, which cannot be bound; use None, bool, int, float, str, bytes, date, datetime, Decimal or a list (of None, bool, int, float, str, date or Decimal)",
        value.get_type().name()?
    )))
}
