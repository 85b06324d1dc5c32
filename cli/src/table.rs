//! Plain-text tables for the terminal.

/// Rows of cells as lines, each column as wide as its widest cell, two
/// spaces apart.
pub fn align<R: AsRef<[String]>>(rows: &[R]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.as_ref().iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let line = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
