//! `scripts/bench.sh media`: what `Read` of a screenshot or a PDF costs on the server (decode,
//! scale, encode; pages picked, text extracted) and what it adds to the model request, as a
//! table (asserts nothing). `cargo run --release -p outboard-media --example bench_media`.
//!
//! The screenshot is synthetic but shaped like one: a 3840 × 2160 (4K) PNG of flat panels,
//! text-like strokes and a noisy photo region, about 4 MB, so PNG compresses it as it does a
//! real capture. Each row is the median and the worst of 15 runs.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a bench binary may panic

use std::io::Cursor;
use std::time::{Duration, Instant};

use image::{DynamicImage, ImageBuffer, ImageFormat, Rgb};

fn screenshot(width: u32, height: u32) -> Vec<u8> {
    let mut seed = 0x2545_f491_u32;
    let img = ImageBuffer::from_fn(width, height, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let noise = seed.to_le_bytes();
        if x > width * 3 / 4 && y > height * 3 / 5 {
            // A photo: noise over a gradient.
            Rgb([
                ((x / 7) as u8).wrapping_add(noise[0] / 4),
                ((y / 5) as u8).wrapping_add(noise[1] / 4),
                noise[2] / 2,
            ])
        } else if (y / 18) % 2 == 0 && (x / 9 + y / 3) % 5 != 0 && x % 400 < 360 {
            // Lines of "text": dark strokes on white.
            if noise[0] < 90 {
                Rgb([30, 30, 40])
            } else {
                Rgb([250, 250, 250])
            }
        } else {
            // Panels.
            let panel = ((x / 640) + (y / 360)) as u8;
            Rgb([236 - panel * 6, 238 - panel * 4, 242])
        }
    });
    let mut out = Cursor::new(Vec::new());
    DynamicImage::ImageRgb8(img).write_to(&mut out, ImageFormat::Png).unwrap_or_default();
    out.into_inner()
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    times.sort();
    (times[runs / 2], times[runs - 1], last.expect("runs > 0"))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn kib(n: usize) -> String {
    format!("{:.0}", n as f64 / 1024.0)
}

fn main() {
    let runs = 15;
    println!(
        "Read of an image or a PDF: server cost and request bytes (median / worst of {runs})\n"
    );
    println!(
        "| input | source KiB | sent as | sent KiB | base64 KiB | est. tokens | ms p50 | ms max |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for (label, w, h) in [
        ("4K screenshot", 3840, 2160),
        ("1080p screenshot", 1920, 1080),
        ("small (kept)", 1200, 800),
    ] {
        let src = screenshot(w, h);
        let (p50, max, got) = time(runs, || outboard_media::prepare_image(&src));
        let Ok(p) = got else {
            println!("| {label} | {} | error | | | | | |", kib(src.len()));
            continue;
        };
        let b64 = outboard_media::base64(&p.bytes);
        println!(
            "| {label} {w}×{h} | {} | {} {}×{} | {} | {} | {} | {} | {} |",
            kib(src.len()),
            p.media_type,
            p.width,
            p.height,
            kib(p.bytes.len()),
            kib(b64.len()),
            outboard_media::image_tokens(p.width, p.height),
            ms(p50),
            ms(max)
        );
    }
    let texts: Vec<String> = (1..=200)
        .map(|i| format!("Page {i}: the quarterly design review covers the budget and the plan."))
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let pdf = outboard_media::sample_pdf(&texts);
    for (label, pages) in
        [("PDF 200 pages, pages 1-20", "1-20"), ("PDF 200 pages, page 150", "150")]
    {
        let (p50, max, got) = time(runs, || outboard_media::prepare_pdf(&pdf, Some(pages)));
        let Ok(p) = got else { continue };
        let doc = p.document.as_ref().map_or(0, Vec::len);
        println!(
            "| {label} | {} | application/pdf ({} pages) + text {} KiB | {} | {} | {} | {} | {} |",
            kib(pdf.len()),
            p.last - p.first + 1,
            kib(p.text.len()),
            kib(doc),
            kib(doc.div_ceil(3) * 4),
            outboard_media::pdf_tokens(p.last - p.first + 1, p.text.len()),
            ms(p50),
            ms(max)
        );
    }
}
