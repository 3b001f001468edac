//! `outboard run --image FILE`: the images sent with a prompt. Each is read (at most
//! [`MAX_IMAGE_FILE_BYTES`]), checked to be a picture models take, and scaled down here when it
//! is too big to send as it is (the server checks and scales again: it trusts no client), so a
//! 4 MB screenshot goes as a few hundred KB and the message stays one frame of the protocol.

use std::path::{Path, PathBuf};

use outboard_shared::{ImageUpload, MAX_MESSAGE_IMAGES};

/// The largest image file read.
pub const MAX_IMAGE_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Why an image cannot be sent; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// More images than a message carries.
    #[error("at most {MAX_MESSAGE_IMAGES} images go with one prompt")]
    TooMany,
    /// The file cannot be read.
    #[error("cannot read the image {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// Over [`MAX_IMAGE_FILE_BYTES`].
    #[error("the image {path} is {bytes} bytes, over the {MAX_IMAGE_FILE_BYTES}-byte limit")]
    TooLarge { path: PathBuf, bytes: u64 },
    /// Not a picture models take, or damaged.
    #[error("the image {path}: {source}")]
    Invalid { path: PathBuf, source: outboard_media::MediaError },
}

/// The images of `paths`, ready to send.
pub fn load(paths: &[PathBuf]) -> Result<Vec<ImageUpload>, ImageError> {
    if paths.len() > MAX_MESSAGE_IMAGES {
        return Err(ImageError::TooMany);
    }
    paths.iter().map(|p| load_one(p)).collect()
}

fn load_one(path: &Path) -> Result<ImageUpload, ImageError> {
    let read = |source| ImageError::Read { path: path.to_owned(), source };
    let bytes = std::fs::metadata(path).map_err(read)?.len();
    if bytes > MAX_IMAGE_FILE_BYTES {
        return Err(ImageError::TooLarge { path: path.to_owned(), bytes });
    }
    let raw = std::fs::read(path).map_err(read)?;
    let prepared = outboard_media::prepare_image(&raw)
        .map_err(|source| ImageError::Invalid { path: path.to_owned(), source })?;
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok(ImageUpload { name, data: outboard_media::base64(&prepared.bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.png");
        std::fs::write(&text, "not a picture").unwrap();
        let err = load(&[text]).unwrap_err().to_string();
        assert!(err.contains("notes.png") && err.contains("not an image"), "{err}");
        let err = load(&[dir.path().join("missing.png")]).unwrap_err().to_string();
        assert!(err.contains("cannot read the image") && err.contains("missing.png"), "{err}");
        let many = vec![dir.path().join("a.png"); MAX_MESSAGE_IMAGES + 1];
        assert!(matches!(load(&many), Err(ImageError::TooMany)));
    }
}
