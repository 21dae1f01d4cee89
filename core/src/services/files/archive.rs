//! Zip archives from outside: `.zip` uploads, and the containers `.xlsx` and `.docx` files
//! are. An archive is checked before anything reads it ([`Archive::check`]): every entry is
//! decompressed once here, chunk by chunk and never kept, and must give exactly the size its
//! header declares, within the upload's decoded-size cap in total. Decompression is
//! deterministic, so any later read of an entry (ours, or calamine's over the same bytes)
//! yields what was counted: a small archive that inflates to gigabytes, or an entry that lies
//! about its size, is refused before a byte of it is held.

use std::io::{Cursor, Read};

use bytes::Bytes;
use zip::ZipArchive;

use super::rows::Caps;
use crate::error::{Error, Result};

/// Entries an archive may have: an `.xlsx` has a few dozen, a `.docx` as many.
const MAX_ENTRIES: usize = 10_000;

/// Bytes decompressed between checks of the statement's deadline and memory.
const STEP: usize = 64 * 1024;

/// An archive whose entries were all checked (see the module's comment).
pub(super) struct Archive {
    zip: ZipArchive<Cursor<Bytes>>,
    /// Each entry's name and size, as checked.
    sizes: Vec<(String, u64)>,
}

impl Archive {
    /// Opens and checks `bytes` as a zip archive; `what` names it in errors ("The archive",
    /// "The .xlsx file").
    pub(super) fn check(bytes: Bytes, caps: Caps, what: &str) -> Result<Archive> {
        let damaged = |e: zip::result::ZipError| {
            Error::invalid(format!("{what} is not a readable zip archive: {e}"))
        };
        let mut zip = ZipArchive::new(Cursor::new(bytes)).map_err(damaged)?;
        if zip.len() > MAX_ENTRIES {
            return Err(Error::invalid(format!(
                "{what} has {} entries; at most {MAX_ENTRIES} are read",
                zip.len()
            )));
        }
        let mut total = 0u64;
        let mut buffer = vec![0u8; STEP];
        let mut sizes = Vec::with_capacity(zip.len()); // bounded: MAX_ENTRIES
        for index in 0..zip.len() {
            let mut entry = zip.by_index(index).map_err(damaged)?;
            let name = entry.name().map(|n| n.into_owned()).unwrap_or_default();
            if entry.encrypted() {
                return Err(Error::invalid(format!(
                    "{what} is encrypted ('{}'); upload it without a password",
                    name
                )));
            }
            let declared = entry.size();
            let mut read = 0u64;
            loop {
                crate::cancel::check()?;
                let n = entry.read(&mut buffer).map_err(|e| {
                    Error::invalid(format!(
                        "{what} is damaged: its entry '{}' cannot be decompressed ({e})",
                        name
                    ))
                })?;
                if n == 0 {
                    break;
                }
                read += n as u64;
                total = total.saturating_add(n as u64);
                if read > declared {
                    return Err(Error::invalid(format!(
                        "{what} is damaged: its entry '{}' decompresses to more than the {declared} bytes it declares",
                        name
                    )));
                }
                if total > caps.max_bytes {
                    return Err(caps.bytes_over());
                }
            }
            if read != declared {
                return Err(Error::invalid(format!(
                    "{what} is damaged: its entry '{}' decompresses to {read} bytes, not the {declared} it declares",
                    name
                )));
            }
            sizes.push((name, read));
        }
        Ok(Archive { zip, sizes })
    }

    /// Each entry's name and (checked) size.
    pub(super) fn sizes(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.sizes.iter().map(|(name, size)| (name.as_str(), *size))
    }

    /// The entry `name`'s bytes, or None when there is none.
    pub(super) fn read(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(index) = self.zip.index_for_name(name) else {
            return Ok(None);
        };
        self.read_at(index).map(Some)
    }

    fn read_at(&mut self, index: usize) -> Result<Vec<u8>> {
        let mut entry = self
            .zip
            .by_index(index)
            .map_err(|e| Error::invalid(format!("the archive cannot be read: {e}")))?;
        // The size was checked against what the entry gives (`check`) and the caps; what is
        // held now must also fit the statement's memory.
        crate::capacity::check(entry.size(), "an archive entry")?;
        let mut bytes = Vec::with_capacity(entry.size() as usize); // bounded: checked above
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| Error::invalid(format!("the archive cannot be read: {e}")))?;
        Ok(bytes)
    }

    /// The one file a `.zip` upload holds, with its name (folders, and the `__MACOSX/` and
    /// dot-file entries archivers add, do not count). An archive of no file or of several is
    /// refused, as MindsDB refuses it.
    pub(super) fn only_file(&mut self) -> Result<(String, Vec<u8>)> {
        let name_of = |zip: &ZipArchive<Cursor<Bytes>>, i| match zip.name_for_index(i) {
            Some(Ok(name)) => name.into_owned(),
            _ => String::new(),
        };
        let files: Vec<usize> = (0..self.zip.len())
            .filter(|&i| {
                let name = name_of(&self.zip, i);
                let base = name.rsplit('/').next().unwrap_or_default();
                !name.is_empty()
                    && !name.ends_with('/')
                    && !name.starts_with("__MACOSX/")
                    && !base.starts_with('.')
            })
            .collect();
        match files[..] {
            [index] => {
                let name = name_of(&self.zip, index);
                let name = name.rsplit('/').next().unwrap_or_default().to_string();
                Ok((name, self.read_at(index)?))
            }
            [] => Err(Error::invalid("The archive holds no file")),
            _ => Err(Error::invalid(format!(
                "The archive holds {} files; an archive must contain only one data file",
                files.len()
            ))),
        }
    }
}
