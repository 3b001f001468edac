//! Files too large to diff or push: a snapshot (`outboard_snapshot`) leaves out, unread, every
//! file over [`MAX_FILE_BYTES`] by its `lstat` size (an 8 GiB sparse file costs nothing), and the
//! diff and the push name them as too large instead.

pub use outboard_snapshot::{TooLarge, MAX_FILE_BYTES};

/// The lines put before a diff that left files out (text before the first `diff --git` line,
/// which `git apply` and `patch` skip).
pub fn notice(skip: &[TooLarge]) -> String {
    if skip.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "# Not compared: {} over the {} MiB limit of diffs and pushes (left out, not read):\n",
        if skip.len() == 1 { "one file is" } else { "these files are" },
        MAX_FILE_BYTES >> 20
    );
    for file in skip {
        text.push_str(&format!(
            "#   {} ({})\n",
            file.path,
            outboard_org::quota::human_bytes(file.bytes)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_names_each_file_left_out() {
        let found = vec![TooLarge { path: "sparse".into(), bytes: 8 << 30 }];
        assert!(notice(&found).contains("#   sparse (8 GiB)"), "{}", notice(&found));
        assert_eq!(notice(&[]), "");
    }
}
