//! Sentence embedding models run in process (`embedding_model = {"provider": "local",
//! "model_name": …}`): folders of sentence-transformers models (`config.json`,
//! `model.safetensors`, `vocab.txt`, optionally `sentence_bert_config.json`), such as
//! all-MiniLM-L6-v2, run by `mindlite_vectors::sentence`. A model is named by its folder's name
//! under `embedding.models_dir`; the local edition also takes a folder's path, the hosted one
//! only names, so a tenant never reads a file the operator did not put there. Nothing is ever
//! downloaded. A model is read once, then kept while the engine lives.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mindlite_vectors::sentence::SentenceModel;
use parking_lot::Mutex;

use crate::config::{Config, Edition};
use crate::error::{Error, Result};

/// The name of the provider that runs models in process.
pub(crate) const PROVIDER: &str = "local";
/// Largest weights file read.
const MAX_WEIGHTS_BYTES: u64 = 2 << 30;

/// The models of one engine.
#[derive(Debug)]
pub(crate) struct SentenceModels {
    dir: Option<PathBuf>,
    /// Whether a model may be named by a folder's path.
    paths: bool,
    loaded: Mutex<HashMap<PathBuf, Arc<SentenceModel>>>,
}

impl SentenceModels {
    /// The models `config` makes available.
    pub(crate) fn new(config: &Config) -> SentenceModels {
        let dir = &config.embedding.models_dir;
        SentenceModels {
            dir: (!dir.is_empty()).then(|| PathBuf::from(dir)),
            paths: config.edition == Edition::Local,
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The vectors of `texts` by the model `name`, computed on a blocking thread with every
    /// core.
    pub(crate) async fn embed(
        self: &Arc<Self>,
        name: &str,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>> {
        let folder = self.folder(name)?;
        let models = Arc::clone(self);
        crate::memory::spawn_blocking(move || {
            let model = models.load(&folder)?;
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            Ok(model.embed_all(&texts, threads))
        })
        .await
        .map_err(|e| Error::internal(format!("a local embedding model failed: {e}")))?
    }

    /// Fails unless `name` names a folder holding a model's weights.
    pub(crate) fn check(&self, name: &str) -> Result<()> {
        let folder = self.folder(name)?;
        if !folder.join("model.safetensors").is_file() {
            return Err(Error::invalid(format!(
                "Local embedding model '{name}': its folder has no model.safetensors"
            )));
        }
        Ok(())
    }

    /// The folder the model `name` is in.
    fn folder(&self, name: &str) -> Result<PathBuf> {
        let bare = !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..";
        let folder = match (&self.dir, bare) {
            (Some(dir), true) => dir.join(name),
            _ if self.paths && Path::new(name).is_absolute() => PathBuf::from(name),
            (None, true) => {
                return Err(Error::invalid(format!(
                    "Local embedding model '{name}': no models folder is configured (embedding.models_dir); the local edition also takes a model folder's absolute path"
                )))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "Local embedding model '{name}': give the name of a folder in the models folder (embedding.models_dir){}",
                    if self.paths { " or a folder's absolute path" } else { "" }
                )))
            }
        };
        folder.canonicalize().map_err(|e| {
            Error::invalid(format!(
                "Local embedding model '{name}': its folder cannot be read: {e}"
            ))
        })
    }

    /// The model in `folder`, read on first use.
    fn load(&self, folder: &Path) -> Result<Arc<SentenceModel>> {
        if let Some(model) = self.loaded.lock().get(folder) {
            return Ok(Arc::clone(model));
        }
        let shown = folder.display();
        let read_text = |file: &str| {
            std::fs::read_to_string(folder.join(file)).map_err(|e| {
                Error::invalid(format!(
                    "The model folder {shown} has no readable {file}: {e}"
                ))
            })
        };
        let weights_path = folder.join("model.safetensors");
        let size = std::fs::metadata(&weights_path)
            .map_err(|e| {
                Error::invalid(format!(
                    "The model folder {shown} has no readable model.safetensors: {e}"
                ))
            })?
            .len();
        if size > MAX_WEIGHTS_BYTES {
            return Err(Error::invalid(format!(
                "The model in {shown} has {size} bytes of weights; at most {MAX_WEIGHTS_BYTES} are read"
            )));
        }
        let weights = std::fs::read(&weights_path)
            .map_err(|e| Error::invalid(format!("Reading {}: {e}", weights_path.display())))?;
        let sentence = read_text("sentence_bert_config.json").ok();
        let model = SentenceModel::from_files(
            &read_text("config.json")?,
            &weights,
            &read_text("vocab.txt")?,
            sentence.as_deref(),
        )
        .map_err(|e| Error::invalid(format!("The model in {shown}: {e}")))?;
        let model = Arc::new(model);
        self.loaded
            .lock()
            .insert(folder.to_path_buf(), Arc::clone(&model));
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_tenants_name_models_only_inside_the_models_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mini")).unwrap();
        let mut config = Config::default();
        config.embedding.models_dir = dir.path().display().to_string();
        let local = SentenceModels::new(&config);
        assert!(local.folder("mini").is_ok());
        assert!(local
            .folder(&dir.path().join("mini").display().to_string())
            .is_ok());
        config.edition = Edition::Hosted;
        let hosted = SentenceModels::new(&config);
        assert!(hosted.folder("mini").is_ok());
        for name in ["/etc", "../mini", "..", "mini/../..", ""] {
            let e = hosted.folder(name).unwrap_err();
            assert!(e.message().contains("models folder"), "{name}: {e}");
        }
        assert!(hosted.folder("missing").is_err());
        let e = local.load(dir.path()).unwrap_err();
        assert!(e.message().contains("model.safetensors"), "{e}");
    }
}
