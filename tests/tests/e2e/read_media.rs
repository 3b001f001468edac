//! `Read` of a picture or a PDF, and `outboard run --image`, end to end: the real `outboard`
//! binary in embedded mode on a project directory, the mock model over real HTTP in each
//! provider's dialect. The next model request after the `Read` carries the image (scaled down
//! when large) and the PDF as each API takes them: Anthropic's `image` and `document` blocks in
//! the `tool_result`, the Responses API's `input_image` and `input_file` in the
//! `function_call_output`, and for Chat Completions (whose tool messages are text) the PDF's text
//! in the tool message and the image as an `image_url` in a user message right after. A model
//! without vision gets a note instead of the image; bad files get a clear tool error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageBuffer, ImageFormat, Rgba};
use outboard_tests::harness::{outboard_in, CliRun};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall, RecordedRequest};
use serde_json::{json, Value};

/// A `width` × `height` PNG with a gradient (compresses like a screenshot).
fn png(width: u32, height: u32) -> Vec<u8> {
    let img = ImageBuffer::from_fn(width, height, |x, y| {
        Rgba([(x % 251) as u8, (y % 241) as u8, ((x + y) % 239) as u8, 255])
    });
    let mut out = Cursor::new(Vec::new());
    DynamicImage::ImageRgba8(img).write_to(&mut out, ImageFormat::Png).unwrap();
    out.into_inner()
}

/// The dimensions of an image sent as base64.
fn dims(b64: &str) -> (u32, u32) {
    let bytes = outboard_media::from_base64(b64).unwrap();
    let img = image::load_from_memory(&bytes).unwrap();
    (img.width(), img.height())
}

/// A project with a large screenshot, a small icon, a two-page PDF and a 30-page one.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shot.png"), png(3000, 2000)).unwrap();
    std::fs::write(dir.path().join("icon.png"), png(64, 48)).unwrap();
    let pdf = outboard_media::sample_pdf(&["Quarterly design review", "Second page: budget"]);
    std::fs::write(dir.path().join("design.pdf"), pdf).unwrap();
    let pages: Vec<String> = (1..=30).map(|i| format!("Manual page {i}")).collect();
    let pages: Vec<&str> = pages.iter().map(String::as_str).collect();
    std::fs::write(dir.path().join("manual.pdf"), outboard_media::sample_pdf(&pages)).unwrap();
    dir
}

/// `outboard run --json` in embedded mode in `cwd`, speaking `provider` to `mock` as `model`.
async fn run(mock: &MockLlm, provider: &str, model: &str, cwd: &Path, extra: &[&str]) -> CliRun {
    let base = match provider {
        "anthropic" => mock.anthropic_base_url(),
        "openai" => mock.openai_base_url(),
        _ => mock.responses_base_url(),
    };
    let data = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["run", "--json", "--provider", provider, "--base-url", &base]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(["--model", model, "--context-window", "200000", "--data"].map(str::to_owned));
    args.push(data.path().to_str().unwrap().to_owned());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push("look at the design".to_owned());
    let cwd = cwd.to_path_buf();
    let key = match provider {
        "anthropic" => "ANTHROPIC_API_KEY",
        _ => "OPENAI_API_KEY",
    };
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        outboard_in(Some(&cwd), &[(key, "test-key")], &args, None)
    })
    .await
    .unwrap()
    .unwrap();
    drop(data);
    out
}

fn reads(calls: &[(&str, Value)]) -> MockStep {
    MockStep::tool_calls(
        calls
            .iter()
            .map(|(id, input)| MockToolCall::new("Read", input.clone()).with_id(id))
            .collect(),
    )
}

fn script() -> Vec<MockStep> {
    vec![
        reads(&[
            ("img", json!({"file_path": "/workspace/shot.png"})),
            ("pdf", json!({"file_path": "design.pdf"})),
        ]),
        MockStep::text("I see the design."),
    ]
}

/// The request after the tool calls.
fn second(mock: &MockLlm) -> RecordedRequest {
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "two model calls");
    requests[1].clone()
}

#[tokio::test]
async fn anthropic_gets_image_and_document_blocks_in_the_tool_results() {
    let dir = project();
    let mock = MockLlm::start(script()).await.unwrap();
    let out = run(&mock, "anthropic", "claude-sonnet-4-5", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let body = second(&mock).body;
    let results: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{body}");
    let image = &results[0]["content"];
    assert_eq!(image[0]["type"], "text");
    assert!(image[0]["text"].as_str().unwrap().contains("scaled down from 3000×2000"), "{image}");
    assert_eq!(image[1]["type"], "image");
    assert_eq!(image[1]["source"]["type"], "base64");
    // A gradient this size is over the PNG budget as PNG: it goes as JPEG.
    assert_eq!(image[1]["source"]["media_type"], "image/jpeg");
    assert_eq!(dims(image[1]["source"]["data"].as_str().unwrap()), (1568, 1045));
    let doc = &results[1]["content"];
    assert_eq!(doc[1]["type"], "document", "{doc}");
    assert_eq!(doc[1]["source"]["media_type"], "application/pdf");
    let pdf = outboard_media::from_base64(doc[1]["source"]["data"].as_str().unwrap()).unwrap();
    assert_eq!(pdf, std::fs::read(dir.path().join("design.pdf")).unwrap());
    // The event log (and so the client) says what was read, in a line.
    let shown: Vec<Value> =
        out.json_lines().unwrap().into_iter().filter(|l| l["type"] == "tool_result").collect();
    assert!(shown[0]["output"]
        .as_str()
        .unwrap()
        .starts_with("Image /workspace/shot.png: 1568×1045"));
    assert_eq!(shown[0]["attachments"][0]["kind"], "image");
}

#[tokio::test]
async fn responses_gets_input_image_and_input_file_in_the_function_output() {
    let dir = project();
    let mock = MockLlm::start(script()).await.unwrap();
    let out = run(&mock, "responses", "gpt-5", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let body = second(&mock).body;
    let outputs: Vec<&Value> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs.len(), 2, "{body}");
    let image = outputs[0]["output"].as_array().expect("the output is a list of parts");
    assert_eq!(image[0]["type"], "input_text");
    assert_eq!(image[1]["type"], "input_image");
    let url = image[1]["image_url"].as_str().unwrap();
    let b64 = url.strip_prefix("data:image/jpeg;base64,").expect("a JPEG data URL");
    assert_eq!(dims(b64), (1568, 1045));
    let doc = outputs[1]["output"].as_array().unwrap();
    assert_eq!(doc[1]["type"], "input_file");
    assert_eq!(doc[1]["filename"], "design.pdf");
    assert!(doc[1]["file_data"].as_str().unwrap().starts_with("data:application/pdf;base64,JVBER"));
}

/// The Chat Completions messages after the assistant's calls.
fn after_calls(body: &Value) -> Vec<Value> {
    let messages = body["messages"].as_array().unwrap();
    let at = messages.iter().position(|m| m["tool_calls"].is_array()).expect("the calls");
    messages[at + 1..].to_vec()
}

#[tokio::test]
async fn chat_completions_gets_the_pdf_text_and_the_image_in_a_user_message() {
    let dir = project();
    let mock = MockLlm::start(script()).await.unwrap();
    let out = run(&mock, "openai", "gpt-4o", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let after = after_calls(&second(&mock).body);
    assert_eq!(after.len(), 3, "two tool messages, then the image: {after:#?}");
    assert_eq!(after[0]["role"], "tool");
    assert!(after[0]["content"].as_str().unwrap().contains("follows in the next user message"));
    assert_eq!(after[1]["role"], "tool");
    let pdf_text = after[1]["content"].as_str().unwrap();
    assert!(pdf_text.contains("--- page 1 ---\nQuarterly design review"), "{pdf_text}");
    assert!(pdf_text.contains("--- page 2 ---\nSecond page: budget"), "{pdf_text}");
    assert_eq!(after[2]["role"], "user");
    let parts = after[2]["content"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "text");
    assert!(parts[0]["text"].as_str().unwrap().contains("shot.png"), "{parts:?}");
    assert_eq!(parts[1]["type"], "image_url");
    let url = parts[1]["image_url"]["url"].as_str().unwrap();
    assert_eq!(dims(url.strip_prefix("data:image/jpeg;base64,").unwrap()), (1568, 1045));
}

#[tokio::test]
async fn a_model_without_vision_gets_a_note_and_an_image_prompt_is_refused() {
    let dir = project();
    let mock = MockLlm::start(script()).await.unwrap();
    // `m` on Chat Completions: no family the table knows, so no images.
    let out = run(&mock, "openai", "m", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let raw = second(&mock).raw;
    assert!(!raw.contains("image_url"), "an image went to a model without vision");
    assert!(raw.contains("is not shown: this model takes no images"), "{raw}");
    // A prompt with an image to that model is refused before anything runs.
    let out = run(&mock, "openai", "m", dir.path(), &["--image", "icon.png"]).await;
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("takes no images"), "{}", out.stderr);
}

#[tokio::test]
async fn run_image_sends_the_picture_with_the_prompt() {
    let dir = project();
    let mock = MockLlm::start(vec![MockStep::text("A gradient.")]).await.unwrap();
    let out =
        run(&mock, "anthropic", "claude-sonnet-4-5", dir.path(), &["--image", "shot.png"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let body = &mock.requests()[0].body;
    let content = body["messages"][0]["content"].as_array().unwrap();
    assert_eq!(content[0]["type"], "text");
    assert_eq!(content[0]["text"], "look at the design");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(dims(content[1]["source"]["data"].as_str().unwrap()), (1568, 1045));
    // Bad images are usage errors that name the file, before any session is made.
    std::fs::write(dir.path().join("fake.png"), "not a picture").unwrap();
    let out =
        run(&mock, "anthropic", "claude-sonnet-4-5", dir.path(), &["--image", "fake.png"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("fake.png") && out.stderr.contains("not an image"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn bad_files_and_long_pdfs_get_clear_tool_errors() {
    let dir = project();
    std::fs::write(dir.path().join("broken.png"), &png(64, 64)[..100]).unwrap();
    std::fs::write(dir.path().join("notpdf.pdf"), "plain text, not a PDF").unwrap();
    let huge = std::fs::File::create(dir.path().join("huge.png")).unwrap();
    huge.set_len(40 * 1024 * 1024).unwrap();
    let mock = MockLlm::start(vec![
        reads(&[
            ("broken", json!({"file_path": "broken.png"})),
            ("notpdf", json!({"file_path": "notpdf.pdf"})),
            ("huge", json!({"file_path": "huge.png"})),
            ("long", json!({"file_path": "manual.pdf"})),
            ("part", json!({"file_path": "manual.pdf", "pages": "12-14"})),
            ("badpages", json!({"file_path": "manual.pdf", "pages": "1-50"})),
        ]),
        MockStep::text("ok"),
    ])
    .await
    .unwrap();
    let out = run(&mock, "anthropic", "claude-sonnet-4-5", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let results: Vec<Value> =
        out.json_lines().unwrap().into_iter().filter(|l| l["type"] == "tool_result").collect();
    let by = |id: &str| results.iter().find(|r| r["call_id"] == id).unwrap().clone();
    let error = |id: &str| {
        let r = by(id);
        assert_eq!(r["is_error"], true, "{r}");
        r["output"].as_str().unwrap().to_owned()
    };
    assert!(error("broken").contains("Cannot show /workspace/broken.png: the file is damaged"));
    assert!(error("notpdf").contains("not a PDF"));
    assert!(error("huge").contains("huge.png"), "{}", error("huge"));
    assert!(error("long").contains("30 pages"), "{}", error("long"));
    assert!(error("badpages").contains("at most 20"), "{}", error("badpages"));
    let part = by("part");
    assert_eq!(part["is_error"], false, "{part}");
    assert!(part["output"].as_str().unwrap().contains("pages 12-14 of 30"), "{part}");
    let doc = &part["attachments"][0];
    assert_eq!(doc["pages"], 3);
    let sub = outboard_media::from_base64(doc["data"].as_str().unwrap()).unwrap();
    let again = outboard_media::prepare_pdf(&sub, None).unwrap();
    assert_eq!(again.page_count, 3);
    assert!(again.text.contains("Manual page 13"), "{}", again.text);
    // The model got every answer in one request that the API would take.
    let raw = &mock.requests()[1].raw;
    assert!(raw.contains("\"type\":\"document\""), "the part went as a document");
}

#[tokio::test]
async fn a_notebooks_image_output_is_shown_as_an_image() {
    let dir = project();
    let plot = outboard_media::base64(&png(320, 240));
    // nbformat wraps base64 in lines; the reader joins them.
    let (a, b) = plot.split_at(plot.len() / 2);
    let notebook = json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{
            "cell_type": "code", "id": "plot-1", "execution_count": 3, "metadata": {},
            "source": ["plt.plot(x)"],
            "outputs": [{
                "output_type": "display_data", "metadata": {},
                "data": {"image/png": format!("{a}\n{b}"), "text/plain": ["<Figure>"]}
            }]
        }]
    });
    std::fs::write(dir.path().join("plot.ipynb"), notebook.to_string()).unwrap();
    let mock = MockLlm::start(vec![
        reads(&[("nb", json!({"file_path": "plot.ipynb"}))]),
        MockStep::text("A line plot."),
    ])
    .await
    .unwrap();
    let out = run(&mock, "anthropic", "claude-sonnet-4-5", dir.path(), &[]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    let body = second(&mock).body;
    let result = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_result")
        .unwrap()
        .clone();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("<cell id=\"plot-1\""), "{text}");
    assert!(text.contains("shown as an image (320×240)"), "{text}");
    assert_eq!(result["content"][1]["type"], "image", "{result}");
    assert_eq!(dims(result["content"][1]["source"]["data"].as_str().unwrap()), (320, 240));
}
