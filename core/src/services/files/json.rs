//! JSON: an array of objects (or one object per line); the columns are the keys in the order
//! the file first names them, their types inferred from the values.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::json::reader::infer_json_schema_from_iterator;
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use bytes::Bytes;

use crate::error::{Error, Result};

use super::rows::{
    check_columns, too_wide, with_text_for_null, FileRows, Sink, BATCH_ROWS, MAX_COLUMNS,
};

fn json_unreadable(e: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!(
        "The file is not readable as JSON (an array of objects, or one object per line): {e}"
    ))
}

/// JSON, an array of objects or one object per line: read twice, one row at a time, never
/// whole (the first pass checks the rows and infers the columns, the second decodes them).
pub(super) fn open_json(bytes: Bytes) -> Result<FileRows> {
    let text = std::str::from_utf8(&bytes).map_err(|e| json_unreadable(&e))?;
    // serde_json's objects sort their keys; the columns keep the order of the file instead.
    // Counted first, so a body of a million distinct keys is refused before inference.
    let order = key_order(text).map_err(|e| {
        if e.is_data() {
            json_unreadable(&format!("a row is not an object ({e})"))
        } else {
            json_unreadable(&e)
        }
    })?;
    if order.len() > MAX_COLUMNS {
        return Err(too_wide(order.len()));
    }
    let inferred = infer_json_schema_from_iterator(json_rows(&bytes)).map_err(|e| match e {
        datafusion::arrow::error::ArrowError::ExternalError(inner) => {
            match inner.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(other) => json_unreadable(&other),
            }
        }
        _ => json_unreadable(
            &"a key holds an object in one row and another kind of value in another",
        ),
    })?;
    let mut fields: Vec<Field> = with_text_for_null(&inferred)
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.sort_by_key(|f| order.get_index_of(f.name()));
    let schema = Schema::new(fields);
    check_columns(&schema)?;
    let schema = Arc::new(schema);
    // Numbers and booleans in a column inferred as text (mixed kinds) are read as their text.
    let mut decoder = JsonReaderBuilder::new(Arc::clone(&schema))
        .with_batch_size(BATCH_ROWS)
        .with_coerce_primitive(true)
        .build_decoder()
        .map_err(|e| json_unreadable(&e))?;
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink: Sink<'_>| {
            let mut chunk = Vec::with_capacity(BATCH_ROWS);
            let mut rows = json_rows(&bytes);
            loop {
                chunk.clear();
                for row in rows.by_ref().take(BATCH_ROWS) {
                    chunk.push(row.map_err(|e| json_unreadable(&e))?);
                }
                if chunk.is_empty() {
                    return Ok(());
                }
                decoder.serialize(&chunk).map_err(|e| json_unreadable(&e))?;
                if let Some(batch) = decoder.flush().map_err(|e| json_unreadable(&e))? {
                    sink(batch)?;
                }
            }
        }),
        sheets: Vec::new(),
    })
}

/// The rows of a JSON file one at a time, each checked to be an object: the elements of a
/// top-level array, or the values one after another.
fn json_rows(
    bytes: &[u8],
) -> impl Iterator<Item = std::result::Result<Value, datafusion::arrow::error::ArrowError>> + '_ {
    let external = |e: Error| datafusion::arrow::error::ArrowError::ExternalError(Box::new(e));
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    let values: Box<dyn Iterator<Item = Result<Value>> + '_> = if bytes.get(start) == Some(&b'[') {
        Box::new(ArrayElements::new(bytes, start + 1).map(|element| {
            element.and_then(|slice| {
                serde_json::from_slice::<Value>(slice).map_err(|e| json_unreadable(&e))
            })
        }))
    } else {
        Box::new(
            serde_json::Deserializer::from_slice(bytes)
                .into_iter::<Value>()
                .map(|value| value.map_err(|e| json_unreadable(&e))),
        )
    };
    values.map(move |value| {
        let value = value.map_err(external)?;
        if value.is_object() {
            Ok(value)
        } else {
            let shown = crate::egress::excerpt(&value.to_string(), 60);
            Err(external(json_unreadable(&format!(
                "a row is not an object: {shown}"
            ))))
        }
    })
}

/// The elements of a JSON array as byte slices, found by scanning for the commas and the
/// closing bracket at depth zero outside strings; each is parsed on its own.
struct ArrayElements<'a> {
    bytes: &'a [u8],
    at: usize,
    done: bool,
}

impl<'a> ArrayElements<'a> {
    /// The elements of the array whose `[` is just before `at`.
    fn new(bytes: &'a [u8], at: usize) -> Self {
        ArrayElements {
            bytes,
            at,
            done: false,
        }
    }
}

impl<'a> Iterator for ArrayElements<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let bytes = self.bytes;
        let skip_space = |mut at: usize| {
            while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
                at += 1;
            }
            at
        };
        let start = skip_space(self.at);
        let fail = |done: &mut bool, what: &str| {
            *done = true;
            Some(Err(json_unreadable(&what)))
        };
        if bytes.get(start) == Some(&b']') {
            self.done = true;
            return if bytes[start + 1..].iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                fail(&mut self.done, "text after the closing bracket")
            };
        }
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        let mut at = start;
        while at < bytes.len() {
            let b = bytes[at];
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth > 0 => depth -= 1,
                    b',' | b']' if depth == 0 => {
                        let element = &bytes[start..at];
                        if element.iter().all(u8::is_ascii_whitespace) {
                            return fail(&mut self.done, "an empty element in the array");
                        }
                        if b == b']' {
                            self.done = true;
                            if !bytes[at + 1..].iter().all(u8::is_ascii_whitespace) {
                                return fail(&mut self.done, "text after the closing bracket");
                            }
                        }
                        self.at = at + 1;
                        return Some(Ok(element));
                    }
                    _ => {}
                }
            }
            at += 1;
        }
        fail(&mut self.done, "the array is not closed")
    }
}

/// Every object key of a JSON document (an array of objects, or objects one after another),
/// each once, in the order it first appears.
fn key_order(text: &str) -> serde_json::Result<KeyOrder> {
    let mut keys = KeyOrder::default();
    for document in serde_json::Deserializer::from_str(text).into_iter::<Keys>() {
        for key in document?.0 {
            keys.insert(key);
        }
    }
    Ok(keys)
}

/// Distinct keys in the order they first appear.
#[derive(Default)]
struct KeyOrder {
    positions: std::collections::HashMap<String, usize>,
}

impl KeyOrder {
    fn insert(&mut self, key: String) {
        let next = self.positions.len();
        self.positions.entry(key).or_insert(next);
    }

    fn get_index_of(&self, key: &str) -> Option<usize> {
        self.positions.get(key).copied()
    }

    fn len(&self) -> usize {
        self.positions.len()
    }
}

/// The keys of an object, or of each object of an array, in order.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct KeysVisitor;
        impl<'de> Visitor<'de> for KeysVisitor {
            type Value = Keys;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object or an array of objects")
            }

            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(Keys(keys))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Keys, A::Error> {
                let mut order = KeyOrder::default();
                while let Some(Keys(more)) = seq.next_element::<Keys>()? {
                    for key in more {
                        order.insert(key);
                    }
                }
                let mut keys: Vec<(String, usize)> = order.positions.into_iter().collect();
                keys.sort_by_key(|(_, position)| *position);
                Ok(Keys(keys.into_iter().map(|(key, _)| key).collect()))
            }
        }
        deserializer.deserialize_any(KeysVisitor)
    }
}
