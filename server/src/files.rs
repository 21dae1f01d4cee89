//! The file routes (`docs/mindsdb-wire.md` §7, the `files_*` captures): `GET /api/files` lists the
//! uploaded files, `PUT /api/files/{name}` uploads one (a multipart form with the file in its
//! `file` field, as MindsDB's clients send it, the file itself as the body, or a JSON body
//! naming a URL to fetch it from), `DELETE /api/files/{name}` removes it. The engine fetches,
//! reads and stores the file; this only unwraps it.

use mindlite::{Engine, Error, ErrorKind, FileFormat};
use serde_json::Value;

use crate::http::Request;
use crate::reply::{json_response, Problem, Reply};

/// `[{"name", "row_count", "columns"}]`.
pub fn list(engine: &Engine) -> Reply {
    let files = engine.list_files()?;
    let listed: Vec<Value> = files.iter().map(|f| f.to_wire_json()).collect();
    Ok(json_response(200, &listed))
}

/// Uploads the file `name`; 200 with `""` as MindsDB answers.
pub async fn put(engine: &Engine, request: &Request, name: &str) -> Reply {
    let content_type = request
        .header("content-type")
        .unwrap_or_default()
        .to_string();
    let upload = if content_type
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        from_form(&content_type, request.body.clone()).await?
    } else if let Some(parameters) = parameters_body(&request.body) {
        // MindsDB reads a JSON object body as the upload's parameters, not as a file.
        check_parameters(parameters.keys().map(String::as_str), &JSON_PARAMETERS)?;
        check_source_type(parameters.get("source_type"))?;
        let text = |key: &str| parameters.get(key).and_then(Value::as_str);
        if text("source_type") != Some("url") {
            return Err(Problem::titled(
                400,
                "File field is missed",
                "The body names no file content: send the file in a multipart form's 'file' field, or the file itself as the body",
            ));
        }
        let Some(url) = text("source") else {
            return Err(Problem::titled(
                400,
                "Missed file source",
                "If the file's source type is URL, the \"source\" field should be specified.",
            ));
        };
        let stored = engine
            .upload_url(name, url, text("original_file_name"))
            .await;
        return match stored {
            Ok(_) => Ok(json_response(200, &"")),
            Err(e) => Err(match e.kind() {
                ErrorKind::Conflict => Problem::titled(400, "File already exists", e.message()),
                // The egress policy's refusal, or the setting that turns URL uploads off.
                ErrorKind::Forbidden => Problem::titled(400, "Invalid URL", e.message()),
                ErrorKind::Unavailable => Problem::titled(400, "Error getting file", e.message()),
                _ => e.into(),
            }),
        };
    } else {
        Upload {
            bytes: request.body.clone(),
            file_name: None,
            format: FileFormat::from_name(&content_type),
        }
    };
    let stored = engine
        .upload_file(
            name,
            upload.bytes,
            upload.format,
            upload.file_name.as_deref(),
        )
        .await;
    match stored {
        Ok(_) => Ok(json_response(200, &"")),
        // MindsDB answers an existing name with 400, not 409.
        Err(e) if e.kind() == ErrorKind::Conflict => {
            Err(Problem::titled(400, "File already exists", e.message()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes the file `name`; 200 with `""`, and MindsDB's 400 "Error deleting file" when
/// there is none.
pub async fn delete(engine: &Engine, name: &str) -> Reply {
    match engine.delete_file(name).await {
        Ok(()) => Ok(json_response(200, &"")),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Err(Problem::titled(400, "Error deleting file", e.message()))
        }
        Err(e) => Err(e.into()),
    }
}

/// The largest body read as upload parameters rather than as a file.
const MAX_PARAMETERS_BODY: usize = 64 * 1024;

/// The fields MindsDB's upload takes in a multipart form.
const FORM_PARAMETERS: [&str; 3] = ["file", "original_file_name", "source_type"];

/// The keys MindsDB's upload takes in a JSON body.
const JSON_PARAMETERS: [&str; 3] = ["original_file_name", "source", "source_type"];

/// MindsDB's 400 "Invalid request parameters" for a field it does not take, naming it and the
/// ones it takes.
fn check_parameters<'a>(
    mut given: impl Iterator<Item = &'a str>,
    allowed: &[&str],
) -> Result<(), Problem> {
    match given.find(|name| !allowed.contains(name)) {
        None => Ok(()),
        Some(unexpected) => Err(Problem::titled(
            400,
            "Invalid request parameters",
            format!(
                "Unexpected parameters in request: {unexpected}. Allowed parameters: {}",
                allowed.join(", ")
            ),
        )),
    }
}

/// `source_type` must be `file` or `url` (or absent: a file).
fn check_source_type(source_type: Option<&Value>) -> Result<(), Problem> {
    match source_type.and_then(Value::as_str) {
        None | Some("file" | "url") => Ok(()),
        Some(other) => Err(Problem::titled(
            400,
            "Wrong file source type",
            format!("Only \"file\" and \"url\" supported as file source, got \"{other}\""),
        )),
    }
}

/// A file as it came in.
struct Upload {
    bytes: Vec<u8>,
    file_name: Option<String>,
    format: Option<FileFormat>,
}

/// The `file` field of a multipart form (its file name, or the `original_file_name` field,
/// names the format).
async fn from_form(content_type: &str, body: Vec<u8>) -> Result<Upload, Problem> {
    let bad = |e: multer::Error| {
        Problem::from(Error::invalid(format!(
            "The multipart form is malformed: {e}"
        )))
    };
    let boundary = multer::parse_boundary(content_type).map_err(bad)?;
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut bytes, mut file_name, mut original) = (None, None, None);
    while let Some(field) = form.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        check_parameters(std::iter::once(name.as_str()), &FORM_PARAMETERS)?;
        match name.as_str() {
            "file" => {
                file_name = field.file_name().map(str::to_string);
                bytes = Some(field.bytes().await.map_err(bad)?.to_vec());
            }
            "original_file_name" => original = Some(field.text().await.map_err(bad)?),
            _ => {
                let source_type = Value::String(field.text().await.map_err(bad)?);
                check_source_type(Some(&source_type))?;
                // A form carries the file; a URL comes in a JSON body with its `source`.
                if source_type == "url" {
                    return Err(Problem::titled(
                        400,
                        "Missed file source",
                        "If the file's source type is URL, send a JSON body with the \"source\" field, not a form.",
                    ));
                }
            }
        }
    }
    let bytes = bytes.ok_or_else(|| {
        Problem::from(Error::invalid(
            "The multipart form has no 'file' field with the file's content",
        ))
    })?;
    let file_name = original.or(file_name);
    Ok(Upload {
        bytes,
        format: file_name.as_deref().and_then(FileFormat::from_name),
        file_name,
    })
}

/// A body that is one JSON object: MindsDB's upload parameters (`{"source_type", "source",
/// "original_file_name"}`), never a file (a JSON file is an array, or one object per line).
fn parameters_body(body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    // Parameters are a few keys: a large body is a file, never parsed twice (a JSON tree of a
    // large body would take several times its size, outside the request's memory budget).
    if body.len() > MAX_PARAMETERS_BODY
        || body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
    {
        return None;
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(parameters)) => Some(parameters),
        _ => None,
    }
}
