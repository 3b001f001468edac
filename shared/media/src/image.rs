//! Images: limits, scaling, re-encoding, token estimate.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::{DynamicImage, ImageFormat, ImageReader, Limits};

use crate::MediaError;

/// The long edge an image is scaled to at most: Anthropic scales anything larger down to about
/// this before the model sees it (its vision page recommends at most 1,568 px), and OpenAI's high
/// detail fits the short side to 768 px anyway; sending more pixels costs bytes and nothing else.
pub const MAX_EDGE: u32 = 1568;

/// The encoded bytes of an image sent at most: well under the APIs' 5 MB per image and small
/// enough that the tool result carrying it stays one frame of the client protocol.
pub const MAX_IMAGE_BYTES: usize = 1536 * 1024;

/// The longest edge decoded at all: a 16k × 16k picture is larger than any screen or scan a
/// person asks about; beyond it the header's dimensions are refused before any pixel is read.
pub const MAX_SOURCE_EDGE: u32 = 16_384;

/// The memory the decoder may allocate: an 8k × 8k RGBA picture, so a small file that claims
/// huge dimensions (a decompression bomb) fails instead of taking the server's memory.
pub const MAX_DECODE_BYTES: u64 = 256 * 1024 * 1024;

/// An image ready for a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedImage {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: &'static str,
    /// The encoded image.
    pub bytes: Vec<u8>,
    /// Its width in pixels.
    pub width: u32,
    /// Its height in pixels.
    pub height: u32,
    /// The source's width, height and bytes.
    pub source: (u32, u32, usize),
    /// Whether it was scaled or re-encoded (else `bytes` is the source).
    pub converted: bool,
}

/// The media type of an image file by its name's extension; `None` for any other file.
pub fn image_media_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

fn media_type(format: ImageFormat) -> Option<&'static str> {
    Some(match format {
        ImageFormat::Png => "image/png",
        ImageFormat::Jpeg => "image/jpeg",
        ImageFormat::Gif => "image/gif",
        ImageFormat::WebP => "image/webp",
        _ => return None,
    })
}

/// A reader of `bytes`; `limited`: with the decode limits (the header alone is read without, to
/// report a too-large image by its size).
fn reader(bytes: &[u8], limited: bool) -> Result<ImageReader<Cursor<&[u8]>>, MediaError> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| MediaError::Corrupt(e.to_string()))?;
    if !limited {
        reader.no_limits();
        return Ok(reader);
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SOURCE_EDGE);
    limits.max_image_height = Some(MAX_SOURCE_EDGE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    Ok(reader)
}

/// Checks, decodes and, where needed, scales and re-encodes `bytes` (see the crate's header).
/// The source is sent as it is when it is already small enough, so a screenshot keeps its exact
/// pixels.
pub fn prepare_image(bytes: &[u8]) -> Result<PreparedImage, MediaError> {
    let probe = reader(bytes, false)?;
    let Some(format) = probe.format() else {
        return Err(MediaError::NotAnImage(String::new()));
    };
    let Some(source_type) = media_type(format) else {
        return Err(MediaError::NotAnImage(format!(" (it is {format:?})")));
    };
    let (width, height) = probe.into_dimensions().map_err(decode_error)?;
    if width > MAX_SOURCE_EDGE || height > MAX_SOURCE_EDGE {
        return Err(MediaError::TooLarge { width, height, max: MAX_SOURCE_EDGE });
    }
    if width == 0 || height == 0 {
        return Err(MediaError::Corrupt("the image has no pixels".into()));
    }
    // Decoded even when sent as it is: a damaged file is reported here, not by the API.
    let decoded = reader(bytes, true)?.decode().map_err(|e| match e {
        image::ImageError::Limits(_) => {
            MediaError::TooLarge { width, height, max: MAX_SOURCE_EDGE.min(8192) }
        }
        other => decode_error(other),
    })?;
    if width.max(height) <= MAX_EDGE && bytes.len() <= MAX_IMAGE_BYTES {
        return Ok(PreparedImage {
            media_type: source_type,
            bytes: bytes.to_vec(),
            width,
            height,
            source: (width, height, bytes.len()),
            converted: false,
        });
    }
    let mut scaled = fit(decoded, MAX_EDGE);
    let photo = format == ImageFormat::Jpeg;
    loop {
        if let Some((media_type, encoded)) = encode(&scaled, photo)? {
            return Ok(PreparedImage {
                media_type,
                bytes: encoded,
                width: scaled.width(),
                height: scaled.height(),
                source: (width, height, bytes.len()),
                converted: true,
            });
        }
        // Not even a low-quality JPEG fits (noise): halve the edge and try again.
        let edge = scaled.width().max(scaled.height()) / 2;
        if edge < 64 {
            return Err(MediaError::Corrupt("the image does not compress".into()));
        }
        scaled = fit(scaled, edge);
    }
}

fn decode_error(e: image::ImageError) -> MediaError {
    match e {
        image::ImageError::Unsupported(u) => MediaError::NotAnImage(format!(" ({u})")),
        other => MediaError::Corrupt(other.to_string()),
    }
}

/// `image` scaled so its long edge is at most `edge` (aspect kept; never enlarged).
fn fit(image: DynamicImage, edge: u32) -> DynamicImage {
    if image.width().max(image.height()) <= edge {
        return image;
    }
    image.resize(edge, edge, image::imageops::FilterType::Triangle)
}

/// PNG for drawings and screenshots (lossless, and what they compress best as) unless it is too
/// big, then JPEG at falling quality; `None` when nothing fits [`MAX_IMAGE_BYTES`].
fn encode(
    image: &DynamicImage,
    photo: bool,
) -> Result<Option<(&'static str, Vec<u8>)>, MediaError> {
    if !photo {
        let mut out = Vec::new();
        image
            .write_with_encoder(PngEncoder::new(&mut out))
            .map_err(|e| MediaError::Corrupt(e.to_string()))?;
        if out.len() <= MAX_IMAGE_BYTES {
            return Ok(Some(("image/png", out)));
        }
    }
    let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
    for quality in [85, 70, 50] {
        let mut out = Vec::new();
        rgb.write_with_encoder(JpegEncoder::new_with_quality(&mut out, quality))
            .map_err(|e| MediaError::Corrupt(e.to_string()))?;
        if out.len() <= MAX_IMAGE_BYTES {
            return Ok(Some(("image/jpeg", out)));
        }
    }
    Ok(None)
}

/// The tokens a `width` × `height` image costs, the larger of the providers' counts: Anthropic's
/// `width × height / 750` and OpenAI's high detail (fit in 2048², short side to 768, 170 per
/// 512-pixel tile plus 85).
pub fn image_tokens(width: u32, height: u32) -> u64 {
    let (w, h) = (u64::from(width), u64::from(height));
    let anthropic = (w * h).div_ceil(750);
    let (mut fw, mut fh) = (w as f64, h as f64);
    let big = fw.max(fh);
    if big > 2048.0 {
        fw *= 2048.0 / big;
        fh *= 2048.0 / big;
    }
    let small = fw.min(fh);
    if small > 768.0 {
        fw *= 768.0 / small;
        fh *= 768.0 / small;
    }
    let tiles = (fw / 512.0).ceil() as u64 * (fh / 512.0).ceil() as u64;
    anthropic.max(85 + 170 * tiles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageBuffer, Rgba};

    fn png(width: u32, height: u32, noise: bool) -> Vec<u8> {
        let mut seed = 7u32;
        let img = ImageBuffer::from_fn(width, height, |x, y| {
            if noise {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let v = seed.to_le_bytes();
                Rgba([v[0], v[1], v[2], 255])
            } else {
                Rgba([(x % 256) as u8, (y % 256) as u8, 128, 255])
            }
        });
        let mut out = Vec::new();
        DynamicImage::ImageRgba8(img).write_with_encoder(PngEncoder::new(&mut out)).unwrap();
        out
    }

    #[test]
    fn a_small_image_is_sent_as_it_is() {
        let bytes = png(300, 200, false);
        let got = prepare_image(&bytes).unwrap();
        assert_eq!(
            (got.media_type, got.width, got.height, got.converted),
            ("image/png", 300, 200, false)
        );
        assert_eq!(got.bytes, bytes);
    }

    #[test]
    fn a_large_image_is_scaled_to_the_edge() {
        let got = prepare_image(&png(4000, 1000, false)).unwrap();
        assert_eq!((got.width, got.height), (MAX_EDGE, 392));
        assert!(got.converted && got.bytes.len() <= MAX_IMAGE_BYTES);
        assert_eq!(got.source.0, 4000);
    }

    #[test]
    fn noise_that_does_not_fit_as_png_becomes_jpeg() {
        let got = prepare_image(&png(1500, 1500, true)).unwrap();
        assert_eq!(got.media_type, "image/jpeg");
        assert!(got.bytes.len() <= MAX_IMAGE_BYTES);
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        assert!(matches!(prepare_image(b"hello, not an image"), Err(MediaError::NotAnImage(_))));
        let mut truncated = png(64, 64, true);
        truncated.truncate(truncated.len() / 2);
        assert!(matches!(prepare_image(&truncated), Err(MediaError::Corrupt(_))));
        // A header claiming 30000 × 30000 pixels (its checksum made right): refused before any
        // pixel is decoded.
        let mut bomb = png(1, 1, false);
        bomb[16..20].copy_from_slice(&30_000u32.to_be_bytes());
        bomb[20..24].copy_from_slice(&30_000u32.to_be_bytes());
        let crc = crc32(&bomb[12..29]);
        bomb[29..33].copy_from_slice(&crc.to_be_bytes());
        let err = prepare_image(&bomb).unwrap_err();
        assert!(matches!(err, MediaError::TooLarge { width: 30_000, height: 30_000, .. }), "{err}");
    }

    /// PNG's CRC-32 (ISO 3309) of a chunk's type and data.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffff_u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    #[test]
    fn media_types_by_extension() {
        assert_eq!(image_media_type("a/B.PNG"), Some("image/png"));
        assert_eq!(image_media_type("x.jpeg"), Some("image/jpeg"));
        assert_eq!(image_media_type("x.svg"), None);
        assert_eq!(image_media_type("README"), None);
    }

    #[test]
    fn tokens_as_the_providers_count() {
        // Anthropic: 1092×1092 ≈ 1590 tokens; OpenAI 1024² → 768² → 4 tiles → 765.
        assert_eq!(image_tokens(1092, 1092), 1590);
        assert_eq!(image_tokens(100, 100), 85 + 170);
    }
}
