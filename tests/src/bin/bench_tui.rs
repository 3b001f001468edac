//! `scripts/bench.sh tui`: the TUI's costs, as a table (asserts nothing).
//!
//! - frame: render time of one frame of a 10,000-line transcript at 120×40 (ratatui's
//!   `TestBackend`, so the figure is our layout and ratatui's buffer work, without terminal IO),
//!   while an answer streams into it (one delta applied per frame), p50/p99;
//! - idle CPU: the real `outboard` binary in tmux, connected and doing nothing, over 5 s.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outboard_cli::tui::app::{App, AppEvent, ConnState};
use outboard_cli::tui::render;
use outboard_cli::tui::theme::Theme;
use outboard_shared::{
    EventKind, Role, SessionAttachResponse, SessionEvent, SessionId, SessionInfo, SessionStatus,
    UserId,
};
use outboard_tests::harness::Api;
use outboard_tests::mock_llm::MockLlm;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent { session_id: SessionId("s_1".into()), seq, ts: String::new(), kind }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn frame_bench() -> anyhow::Result<(usize, Duration, Duration)> {
    let mut app = App::new(Theme { color: true }, 120, 40);
    app.handle(AppEvent::Connection(ConnState::Connected, Some("alice".into())));
    // ~10,000 lines: 1,000 answers of ten lines of markdown each.
    let events: Vec<SessionEvent> = (0..1000u64)
        .map(|i| {
            let text = format!(
                "## Step {i}\n\nSome *prose* with `code` and a list:\n\n- one\n- two\n\n```rust\nlet x = {i};\nlet y = x + 1;\n```"
            );
            ev(i + 1, EventKind::AssistantMessage { text, tool_calls: vec![] })
        })
        .collect();
    let session = SessionInfo {
        id: SessionId("s_1".into()),
        title: "bench".into(),
        owner_id: UserId("u_1".into()),
        owner: "alice".into(),
        status: SessionStatus::Running,
        model: "mock/model".into(),
        last_seq: 1000,
        created_at: String::new(),
        updated_at: String::new(),
        failure: None,
    };
    let snapshot = SessionAttachResponse { session, role: Role::Driver, events, in_flight: None };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let lines = app.transcript_len();
    let mut terminal = Terminal::new(TestBackend::new(120, 40))?;
    let mut times = Vec::new();
    for i in 0..2000 {
        let delta = ev(1000, EventKind::AssistantDelta { text: format!("word{i} ") });
        let t = Instant::now();
        app.handle(AppEvent::Server(Box::new(delta)));
        terminal.draw(|f| render::draw(&app, f))?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok((lines, percentile(&times, 0.5), percentile(&times, 0.99)))
}

fn tmux(socket: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("tmux").args(["-L", socket]).args(args).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// utime + stime of `pid` in clock ticks.
fn cpu_ticks(pid: &str) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

async fn idle_cpu() -> anyhow::Result<f64> {
    let mock = MockLlm::start(vec![]).await?;
    // The `outboard` next to this binary, in embedded mode (its own server in-process), so the
    // figure is the whole client with nothing happening.
    let exe = std::env::current_exe()?.parent().context("exe dir")?.join("outboard");
    anyhow::ensure!(exe.exists(), "{} is missing: build outboard-cli first", exe.display());
    let data = tempfile::tempdir()?;
    let socket = format!("outboard-bench-{}", std::process::id());
    let base_url = mock.anthropic_base_url();
    let key = format!("{}=bench", Api::Anthropic.key_var());
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "40",
            "-e",
            &key,
            exe.to_str().context("path")?,
            "--provider",
            "anthropic",
            "--base-url",
            &base_url,
            "--model",
            "mock",
            "--data",
            data.path().to_str().context("path")?,
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tmux(&socket, &["capture-pane", "-p", "-t", "t"])?.contains("connected") {
        anyhow::ensure!(Instant::now() < deadline, "the TUI did not connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = tmux(&socket, &["list-panes", "-t", "t", "-F", "#{pane_pid}"])?.trim().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(&pid)?;
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    let used = cpu_ticks(&pid)? - before;
    let _ = tmux(&socket, &["kill-server"]);
    // Clock ticks are 1/100 s on Linux.
    Ok(used as f64 / 100.0 / window.as_secs_f64() * 100.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (lines, p50, p99) = frame_bench()?;
    println!("tui");
    println!("{:<58} {:>10} {:>10}", "", "p50", "p99");
    println!(
        "{:<58} {:>10} {:>10}",
        format!("frame, {lines}-line transcript, 120x40, streaming"),
        format!("{:.3} ms", p50.as_secs_f64() * 1000.0),
        format!("{:.3} ms", p99.as_secs_f64() * 1000.0)
    );
    match idle_cpu().await {
        Ok(cpu) => {
            println!("{:<58} {:>10}", "idle CPU of a connected TUI (5 s)", format!("{cpu:.2} %"))
        }
        Err(e) => println!("idle CPU: not measured ({e:#}; needs tmux)"),
    }
    Ok(())
}
