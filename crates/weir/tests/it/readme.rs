//! The README's option tables are the declarations themselves: each table sits under a
//! `<!-- options: NAME -->` marker and must read exactly as `weir::option_tables()` renders it.
//! `WEIR_BLESS_README=1 cargo test -p weir --test it readme` rewrites them from the code.

use std::path::Path;

const MARKER: &str = "<!-- options: ";

#[test]
fn readme_option_tables_match_the_declarations() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let mut updated = String::new();
    let mut rest = readme.as_str();
    let mut seen = Vec::new();
    let tables = weir::option_tables();
    let mut stale = Vec::new();
    while let Some(i) = rest.find(MARKER) {
        let (before, after) = rest.split_at(i);
        updated.push_str(before);
        let end = after.find("-->").expect("a marker ends with -->") + 3;
        let name = after[MARKER.len()..end - 3].trim();
        updated.push_str(&after[..end]);
        updated.push('\n');
        let body = &after[end..].trim_start_matches('\n');
        // The table runs while lines start with '|'.
        let table_len: usize = body
            .lines()
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.len() + 1)
            .sum();
        let (table, tail) = body.split_at(table_len.min(body.len()));
        let specs = tables
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("README names an unknown option table '{name}'"))
            .1;
        let expected = weir_codec::markdown_table(specs);
        if table != expected {
            stale.push(name.to_string());
        }
        updated.push_str(&expected);
        if !tail.starts_with('\n') {
            updated.push('\n');
        }
        seen.push(name.to_string());
        rest = tail;
    }
    updated.push_str(rest);
    let missing: Vec<_> = tables
        .iter()
        .map(|(n, _)| n.to_string())
        .filter(|n| !seen.contains(n))
        .collect();
    if std::env::var_os("WEIR_BLESS_README").is_some() {
        std::fs::write(&path, updated).unwrap();
        assert!(missing.is_empty(), "add a marker for: {missing:?}");
        return;
    }
    assert!(
        missing.is_empty(),
        "the README has no table for {missing:?}; add `<!-- options: NAME -->` markers"
    );
    assert!(
        stale.is_empty(),
        "the README's option tables {stale:?} differ from the declarations; run \
         WEIR_BLESS_README=1 cargo test -p weir --test it readme"
    );
}
