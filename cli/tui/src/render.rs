//! Drawing: a pure function of [`App`] onto a ratatui frame. Top to bottom: the presence bar
//! (session, who is attached and in which role), the transcript (only its visible lines are
//! touched, see [`super::app`]), completions, the composer (disabled-looking for a watcher) and
//! the status line (model, tokens, sandbox, connection, role). The session picker is drawn over
//! the transcript.

use outboard_shared::{Role, SandboxState};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph};
use ratatui::Frame;

use super::app::App;
use super::format::compact;
use super::state::{ConnState, Picker};

/// At most this many composer lines are shown; longer text scrolls inside it.
pub const COMPOSER_MAX_LINES: u16 = 6;

/// Draws the whole screen.
pub fn draw(app: &App, frame: &mut Frame<'_>) {
    let area = frame.area();
    let composer_lines =
        (app.composer.text().split('\n').count() as u16).clamp(1, COMPOSER_MAX_LINES);
    let completions = u16::from(!app.completions().is_empty());
    let todo_panel = app.work.todo_panel(&app.theme);
    let todo_rows = todo_panel.len() as u16;
    let approval_panel =
        app.approvals.panel(&app.theme, app.driving(), app.prompt_armed(), area.width);
    let approval_rows = approval_panel.len() as u16;
    let [top, body, todos, approvals, hints, composer, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(todo_rows),
        Constraint::Length(approval_rows),
        Constraint::Length(completions),
        Constraint::Length(composer_lines + 2),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(presence_bar(app), top);
    draw_transcript(app, frame, body);
    if todo_rows > 0 {
        frame.render_widget(Paragraph::new(todo_panel), todos);
    }
    if approval_rows > 0 {
        frame.render_widget(Paragraph::new(approval_panel), approvals);
    }
    if completions > 0 {
        let text = app.completions().join("  ");
        frame.render_widget(Paragraph::new(Span::styled(text, app.theme.dim())), hints);
    }
    draw_composer(app, frame, composer);
    frame.render_widget(status_line(app), status);
    if let Some(picker) = &app.picker {
        draw_picker(app, picker, frame, body);
    }
    if let Some(picker) = &app.rewind_picker {
        draw_rewind_picker(app, picker, frame, body);
    }
}

fn presence_bar(app: &App) -> Paragraph<'static> {
    let theme = &app.theme;
    let mut spans = Vec::new();
    match &app.session {
        Some(s) => {
            let title = if s.title.is_empty() { "untitled" } else { s.title.as_str() };
            spans.push(Span::styled(format!(" {title} "), theme.bold()));
        }
        None => spans.push(Span::styled(" outboard ", theme.bold())),
    }
    for p in &app.presence {
        let (mark, role) = match p.role {
            Role::Driver => ("●", "driving"),
            Role::Watcher => ("○", "watching"),
        };
        spans.push(Span::raw(format!(" {mark} {} ({role})", p.user)));
    }
    Paragraph::new(Line::from(spans)).style(theme.bar())
}

fn draw_transcript(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let height = usize::from(area.height);
    if app.cells.is_empty() && app.streaming_lines.is_empty() {
        let hint = match &app.session {
            Some(_) if app.driving() => "Type a message and press Enter. /help lists commands.",
            Some(_) => "Nothing here yet. You are watching; /drive asks for the wheel.",
            None => "Not attached to a session. /new starts one, /sessions lists them.",
        };
        let lines = vec![Line::default(), Line::from(Span::styled(hint, app.theme.dim()))];
        frame.render_widget(Paragraph::new(lines), area);
        return;
    }
    // Walk from the bottom, collecting only what fits (plus the scrolled-away part).
    let want = height + app.scroll;
    let blank = Line::default();
    let mut rev: Vec<&Line<'static>> = Vec::with_capacity(want);
    for l in app.streaming_lines.iter().rev() {
        if rev.len() >= want {
            break;
        }
        rev.push(l);
    }
    'cells: for cell in app.cells.iter().rev() {
        if rev.len() >= want {
            break;
        }
        rev.push(&blank);
        for l in cell.lines.iter().rev() {
            if rev.len() >= want {
                break 'cells;
            }
            rev.push(l);
        }
    }
    // Above the oldest event loaded: older history coming, or the session's very beginning.
    let note =
        app.history_note().map(|n| Line::from(Span::styled(format!("· {n}"), app.theme.dim())));
    if let Some(note) = &note {
        if rev.len() < want {
            rev.push(note);
        }
    }
    // Scrolled to the very top, the screen stays full: its first line is the transcript's.
    let skip = app.scroll.min(rev.len().saturating_sub(height));
    let lines: Vec<Line<'static>> =
        rev[skip..].iter().rev().take(height).map(|l| (*l).clone()).collect();
    frame.render_widget(Paragraph::new(lines), area);
    if skip > 0 {
        let tag = format!(" ↑ {skip} lines below · PgDn ");
        let w = tag.chars().count() as u16;
        if area.width > w {
            let r = Rect { x: area.x + area.width - w, y: area.y, width: w, height: 1 };
            frame.render_widget(Paragraph::new(Span::styled(tag, app.theme.bar())), r);
        }
    }
}

fn draw_composer(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let theme = &app.theme;
    let (title, border) = if app.driving() && app.approvals.denying {
        (" reason for denying · Enter denies · Esc goes back ".to_owned(), theme.warn())
    } else if let (true, Some(queued)) = (app.driving(), &app.queued) {
        let lines = queued.lines().count().max(1);
        let what = if lines == 1 { "1 line".to_owned() } else { format!("{lines} lines") };
        (
            format!(" message · {what} queued for the turn's end · Enter adds · Esc interrupts "),
            theme.warn(),
        )
    } else if app.driving() {
        (" message · Enter sends · Alt-Enter newline ".to_owned(), Style::default())
    } else {
        (" watching (read-only) · /drive asks for the wheel ".to_owned(), theme.dim())
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(border)
        .title(Span::styled(title, border));
    let inner = block.inner(area);
    let (line, col) = app.composer.cursor_pos();
    let visible = usize::from(inner.height.max(1));
    let first = line.saturating_sub(visible - 1);
    let text_style = if app.driving() || app.composer.text().starts_with('/') {
        Style::default()
    } else {
        theme.dim()
    };
    let lines: Vec<Line<'static>> = app
        .composer
        .text()
        .split('\n')
        .skip(first)
        .take(visible)
        .map(|l| Line::from(Span::styled(l.to_owned(), text_style)))
        .collect();
    // Keep the cursor's column visible on a narrow screen.
    let width = usize::from(inner.width.max(1));
    let hscroll = col.saturating_sub(width - 1) as u16;
    frame.render_widget(Paragraph::new(lines).block(block).scroll((0, hscroll)), area);
    if app.picker.is_none() {
        let x = inner.x + (col as u16).saturating_sub(hscroll).min(inner.width.saturating_sub(1));
        let y = inner.y + (line - first) as u16;
        frame.set_cursor_position(Position { x, y });
    }
}

/// The spinner's frames, one per [`crate::app::guard::SPIN_MS`].
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// The status line: its parts in a fixed order, and when they do not fit, the least important
/// left out first (see [`fit`]): the mode and the model go last, and a notice is cut to the room
/// the rest leaves it.
fn status_line(app: &App) -> Paragraph<'static> {
    let theme = &app.theme;
    // (importance: 0 kept longest, the part)
    let mut parts: Vec<(u8, Span<'static>)> = Vec::new();
    let (conn, conn_style, conn_rank) = match &app.conn {
        ConnState::Connecting => ("◌ connecting".to_owned(), theme.warn(), 1),
        ConnState::Connected => ("● connected".to_owned(), theme.ok(), 6),
        ConnState::Reconnecting { attempt, reason } => {
            (format!("⟳ reconnecting (attempt {attempt}: {reason})"), theme.warn(), 1)
        }
        ConnState::Gone(reason) => (format!("✗ disconnected: {reason}"), theme.error(), 1),
    };
    if let Some((ms, tokens)) = app.turn_progress().filter(|_| app.running) {
        let frame = SPINNER[(app.now / crate::app::guard::SPIN_MS) as usize % SPINNER.len()];
        let what = if app.turn.interrupting { " interrupting" } else { "" };
        let text = format!(" {frame}{what} {} · ↓ {} tok ", seconds(ms), compact(tokens));
        parts.push((2, Span::styled(text, theme.warn())));
        if app.driving() && !app.turn.interrupting {
            parts.push((6, Span::styled(" Esc stops ", theme.dim())));
        }
    }
    parts.push((conn_rank, Span::styled(format!(" {conn} "), conn_style)));
    let role = if app.session.is_none() {
        "detached"
    } else if app.driving() {
        "driving"
    } else {
        "watching"
    };
    parts.push((4, Span::raw(format!(" {role} "))));
    if app.mode == outboard_shared::SessionMode::Plan {
        parts.push((0, Span::styled(" ⏸ plan mode (Shift-Tab) ", theme.warn())));
    }
    if let Some(s) = &app.session {
        // `provider/model`: the model says enough on a narrow line. The cost is estimated with
        // the built-in list prices (`outboard usage` takes a price file too); `?`: no price.
        let model = s.model.rsplit('/').next().unwrap_or(&s.model);
        let cost = outboard_client::prices::PriceTable::default()
            .price(&s.model)
            .map_or_else(|| " $?".to_owned(), |price| format!(" ~${:.2}", price.cost(&app.usage)));
        parts.push((0, Span::raw(format!(" {model}{cost} "))));
        if let Some(source) = &s.source {
            parts.push((7, Span::raw(format!(" {} ", source.label()))));
        }
    }
    if let Some(last) = app.turn.last.filter(|_| !app.running) {
        let cost = last.cost.map_or_else(|| "$?".to_owned(), |c| format!("${c:.2}"));
        let text =
            format!(" last turn {} · {} tok · {cost} ", seconds(last.ms), compact(last.tokens));
        parts.push((3, Span::raw(text)));
    }
    if let (Some(used), Some(window)) =
        (app.context_used, app.session.as_ref().and_then(|s| s.context_window))
    {
        // The latest call's prompt and answer are the next call's prompt: how full it is. A
        // guessed window (no table, flag, file or server knows it) is marked `?`.
        let percent = used.saturating_mul(100) / window.max(1);
        let style = if percent >= 80 { theme.warn() } else { Style::default() };
        let guess = app
            .session
            .as_ref()
            .and_then(|s| s.context_window_source)
            .is_some_and(|w| w.is_guess());
        let mark = if guess { "?" } else { "" };
        let text = format!(" ctx {}/{}{mark} ({percent}%) ", compact(used), compact(window));
        parts.push((if percent >= 80 { 2 } else { 3 }, Span::styled(text, style)));
    }
    parts.push((
        5,
        Span::raw(format!(
            " {} in {} out tok ",
            compact(app.usage.input_tokens),
            compact(app.usage.output_tokens)
        )),
    ));
    let sandbox = match app.sandbox {
        None | Some((SandboxState::None, _)) => "cold".to_owned(),
        Some((SandboxState::Running, ms)) if ms > 0.0 => format!("running (resumed in {ms:.0} ms)"),
        Some((SandboxState::Running, _)) => "running".to_owned(),
        Some((SandboxState::Suspended, _)) => "frozen".to_owned(),
        Some((SandboxState::Provisioning, _)) => "starting".to_owned(),
        Some((SandboxState::Waiting, _)) => match app.sandbox_queue {
            Some(q) => {
                format!("waiting for a slot (#{} in line, org quota {})", q.position, q.limit)
            }
            None => "waiting for a slot".to_owned(),
        },
        Some((SandboxState::Dead, _)) => "dead".to_owned(),
        Some((SandboxState::Stopped, _)) => "stopped".to_owned(),
        Some((SandboxState::Unknown, _)) => "?".to_owned(),
    };
    parts.push((6, Span::raw(format!(" sandbox {sandbox} "))));
    let notice = app.notice.as_ref().map(|n| Span::styled(format!(" {n} "), theme.warn()));
    Paragraph::new(fit(parts, notice, usize::from(app.width))).style(theme.bar())
}

/// `12s`, `2m05s`: the spinner's and the last turn's time.
fn seconds(ms: u64) -> String {
    match ms / 1000 {
        s @ 0..=59 => format!("{s}s"),
        s => format!("{}m{:02}s", s / 60, s % 60),
    }
}

/// The parts that fit in `width` columns, separated by `│`, in their order: the least
/// important (highest rank; the later of equals) are left out first; the notice, first on the
/// line, is cut to the room left once every part of rank 2 or less is in.
pub(crate) fn fit(
    parts: Vec<(u8, Span<'static>)>,
    notice: Option<Span<'static>>,
    width: usize,
) -> Line<'static> {
    let cols = |s: &Span<'_>| s.content.chars().count() + 1;
    let mut keep: Vec<bool> = vec![true; parts.len()];
    let used = |keep: &[bool]| -> usize {
        parts.iter().zip(keep).filter(|(_, k)| **k).map(|((_, s), _)| cols(s)).sum()
    };
    let notice_cols = notice.as_ref().map_or(0, cols);
    // Leave out parts, least important first, until the notice fits too, but never those of
    // rank 2 or less for a notice's sake.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(parts[i].0), std::cmp::Reverse(i)));
    for &i in &order {
        let over = used(&keep) + notice_cols > width;
        if !over || (parts[i].0 <= 2 && used(&keep) <= width) {
            break;
        }
        keep[i] = false;
    }
    // Then back in, most important first, whatever fits in the room that leaves.
    for &i in order.iter().rev() {
        if !keep[i] && used(&keep) + cols(&parts[i].1) + notice_cols <= width {
            keep[i] = true;
        }
    }
    let room = width.saturating_sub(used(&keep));
    let mut spans = Vec::new();
    if let Some(n) = notice {
        if room > 6 {
            let text = outboard_client::describe::truncate(&n.content, room - 1);
            spans.push(Span::styled(text, n.style));
            spans.push(Span::raw("│"));
        }
    }
    let mut first = true;
    for ((_, span), k) in parts.into_iter().zip(keep) {
        if !k {
            continue;
        }
        if !first {
            spans.push(Span::raw("│"));
        }
        first = false;
        spans.push(span);
    }
    Line::from(spans)
}

fn draw_picker(app: &App, picker: &Picker, frame: &mut Frame<'_>, area: Rect) {
    let items: Vec<ListItem<'static>> = if picker.sessions.is_empty() {
        vec![ListItem::new(Span::styled("no sessions yet — /new starts one", app.theme.dim()))]
    } else {
        picker
            .sessions
            .iter()
            .map(|s| {
                let title = if s.title.is_empty() { "untitled" } else { s.title.as_str() };
                let status = format!("{:?}", s.status).to_lowercase();
                let when = s.updated_at.get(..16).unwrap_or(&s.updated_at).replace('T', " ");
                ListItem::new(Line::from(vec![
                    Span::styled(title.to_owned(), app.theme.bold()),
                    Span::raw(format!("  {} · {status} · {when} · {}", s.owner, s.id)),
                ]))
            })
            .collect()
    };
    let title = " sessions · ↑↓ Enter attaches · Esc closes ";
    draw_list(app, frame, area, title, items, picker.selected);
}

/// The rewind picker: the checkpoints, then what to restore of the one picked.
fn draw_rewind_picker(
    app: &App,
    picker: &super::rewind::RewindPicker,
    frame: &mut Frame<'_>,
    area: Rect,
) {
    let Some(row) = picker.restore else {
        let items = picker
            .checkpoints
            .iter()
            .map(|c| ListItem::new(outboard_client::describe::checkpoint_line(c)));
        let title = " rewind to the state before which prompt? · ↑↓ Enter picks · Esc closes ";
        return draw_list(app, frame, area, title, items.collect(), picker.selected);
    };
    let n = picker.checkpoints.get(picker.selected).map_or(0, |c| c.n);
    let modes = picker.modes();
    let items = modes
        .iter()
        .enumerate()
        .map(|(i, (label, ..))| ListItem::new(format!("{}  {label}", i + 1)));
    let title =
        format!(" checkpoint {n}: restore what? · ↑↓ or 1–{} Enter · Esc back ", modes.len());
    draw_list(app, frame, area, &title, items.collect(), row);
}

/// A bordered list over the top of `area`, `selected` highlighted.
fn draw_list(
    app: &App,
    frame: &mut Frame<'_>,
    area: Rect,
    title: &str,
    items: Vec<ListItem<'static>>,
    selected: usize,
) {
    let w = area.width.saturating_sub(4).max(10).min(area.width);
    let h = (items.len() as u16 + 2).clamp(3, area.height.max(3)).min(area.height);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y, width: w, height: h };
    frame.render_widget(Clear, r);
    let block = Block::default().borders(Borders::ALL).title(title.to_owned());
    let list =
        List::new(items).block(block).highlight_symbol("› ").highlight_style(app.theme.bar());
    let mut state = ListState::default().with_selected(Some(selected));
    frame.render_stateful_widget(list, r, &mut state);
}
