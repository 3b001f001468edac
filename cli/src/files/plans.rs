//! `outboard plans ls|cat`: the org's plans, `/plans/<date>-<slug>.md` files that sessions in
//! plan mode saved with `ExitPlanMode` — versioned org files like memory, each version naming
//! the user who drove the session and the session (`files/history` has them).

use std::io::Write;

use outboard_shared::FileVersion;

use super::{finish, json_line, list_lines, print_content, FilesError};
use crate::args::{PlansCatArgs, PlansCommand, PlansLsArgs};
use crate::client::Client;
use crate::run::Connection;

/// Where the plans are.
pub const PLANS_ROOT: &str = "/plans";

/// Runs `outboard plans …`; returns the exit status.
pub async fn plans(command: &PlansCommand, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let result = match command {
        PlansCommand::Ls(args) => plans_ls(args, out).await,
        PlansCommand::Cat(args) => plans_cat(args, out).await,
    };
    finish(result, out, err)
}

async fn plans_ls(args: &PlansLsArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let mut files: Vec<FileVersion> =
        connected!(&args.connect, |client| client.list_files(PLANS_ROOT.into(), false).await)?;
    // Newest first: the names start with their date, and the time breaks a day's ties.
    files.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| b.path.cmp(&a.path)));
    if args.json {
        json_line(out, &files)
    } else if files.is_empty() {
        writeln!(out, "no plans yet — start a session in plan mode: outboard --plan, or outboard run --plan PROMPT")?;
        Ok(())
    } else {
        out.write_all(list_lines(&files).as_bytes())?;
        Ok(())
    }
}

async fn plans_cat(args: &PlansCatArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = plan_path(&args.path)?;
    let read = connected!(&args.connect, |client| client.read_file(path, None).await)?;
    print_content(&read, out)
}

/// `/plans/NAME.md` from `/plans/NAME.md`, `plans/NAME.md`, `NAME.md` or `NAME`.
pub fn plan_path(arg: &str) -> Result<String, FilesError> {
    let name = arg.trim().trim_start_matches('/');
    let name = name.strip_prefix("plans/").unwrap_or(name);
    if name.is_empty() || name.contains("..") || name.contains('/') {
        return Err(FilesError::Usage(format!(
            "{arg}: name a plan as `outboard plans ls` lists it (/plans/NAME.md)"
        )));
    }
    let name = if name.ends_with(".md") { name.to_owned() } else { format!("{name}.md") };
    Ok(format!("{PLANS_ROOT}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_named_as_listed_or_shorter() {
        for arg in
            ["/plans/2026-12-04-x.md", "plans/2026-12-04-x.md", "2026-12-04-x", " 2026-12-04-x.md"]
        {
            assert_eq!(plan_path(arg).ok().as_deref(), Some("/plans/2026-12-04-x.md"), "{arg}");
        }
        for arg in ["", "/plans/", "../memory/x", "a/b"] {
            assert!(plan_path(arg).is_err(), "{arg}");
        }
    }
}
