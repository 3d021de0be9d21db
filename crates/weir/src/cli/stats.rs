//! `weir stats STATE_DIR`: what a source's state directory holds, read-only (it works while weir
//! runs).

use std::path::Path;

use anyhow::{Context, Result};

pub(crate) fn stats(dir: &Path) -> Result<()> {
    let (checkpoint, setup, stats) = weir_dedup::StateStore::inspect(dir)
        .with_context(|| format!("cannot read the state in {}", dir.display()))?;
    println!("state directory:        {}", dir.display());
    println!(
        "dedup settings:         {}",
        if setup.is_empty() {
            "none (checkpoints only)"
        } else {
            &setup
        }
    );
    print!("{stats}");
    println!("read positions (next to read):");
    for (name, next) in &checkpoint.positions {
        println!("  {name} {next}");
    }
    if !checkpoint.files.is_empty() {
        println!("files of the last step:  {}", checkpoint.files.join(", "));
    }
    Ok(())
}
