//! The file routes (`docs/mindsdb-wire.md` §7, the `files_*` captures): `GET /api/files` lists the
//! uploaded files, `PUT /api/files/{name}` uploads one (a multipart form with the file in its
//! `file` field, as MindsDB's clients send it, or the file itself as the body), `DELETE
//! /api/files/{name}` removes it. The engine reads and stores the file; this only unwraps it.

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
    } else if let Some(url) = url_source(&request.body) {
        return Err(Problem::titled(
            400,
            "Wrong source type",
            format!("This server does not fetch files from URLs ({url}); upload the file itself"),
        ));
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

/// Removes the file `name`; 200 with `""`, 404 when there is none.
pub async fn delete(engine: &Engine, name: &str) -> Reply {
    match engine.delete_file(name).await {
        Ok(()) => Ok(json_response(200, &"")),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Err(Problem::titled(404, "File not found", e.message()))
        }
        Err(e) => Err(e.into()),
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
async fn from_form(content_type: &str, body: Vec<u8>) -> Result<Upload, Error> {
    let bad = |e: multer::Error| Error::invalid(format!("The multipart form is malformed: {e}"));
    let boundary = multer::parse_boundary(content_type).map_err(bad)?;
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut bytes, mut file_name, mut original) = (None, None, None);
    while let Some(field) = form.next_field().await.map_err(bad)? {
        match field.name().unwrap_or_default() {
            "file" => {
                file_name = field.file_name().map(str::to_string);
                bytes = Some(field.bytes().await.map_err(bad)?.to_vec());
            }
            "original_file_name" => original = Some(field.text().await.map_err(bad)?),
            _ => {}
        }
    }
    let bytes = bytes.ok_or_else(|| {
        Error::invalid("The multipart form has no 'file' field with the file's content")
    })?;
    let file_name = original.or(file_name);
    Ok(Upload {
        bytes,
        format: file_name.as_deref().and_then(FileFormat::from_name),
        file_name,
    })
}

/// MindsDB's `{"source_type": "url", "source": …}` body, which asks the server to download.
fn url_source(body: &[u8]) -> Option<String> {
    // Only a small object can be such a request; a large upload is not parsed twice.
    if body.len() > 4096 || body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    match value.get("source_type")?.as_str()? {
        "url" => Some(value.get("source")?.as_str()?.to_string()),
        _ => None,
    }
}
