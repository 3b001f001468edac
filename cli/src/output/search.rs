//! The provider's own web searches (carried by `assistant_message`), shown like tool calls on
//! stderr: `● web search "QUERY": N sources`, then one `⎿  title — url` line per source.

use std::io::{self, Write};

use outboard_shared::ProviderSearch;

use super::Printer;

/// Sources listed per search (the log has them all).
pub const SEARCH_SOURCES: usize = 8;

/// Prints `searches` on the printer's stderr, after any text owed a newline.
pub(super) fn print<O: Write, E: Write>(
    printer: &mut Printer<O, E>,
    searches: &[ProviderSearch],
) -> io::Result<()> {
    if searches.is_empty() {
        return Ok(());
    }
    printer.end_line()?;
    for search in searches {
        let lines = search.lines(SEARCH_SOURCES);
        let mut lines = lines.iter();
        if let Some(head) = lines.next() {
            writeln!(printer.err, "● {head}")?;
        }
        for line in lines {
            writeln!(printer.err, "  ⎿  {line}")?;
        }
    }
    printer.err.flush()
}
