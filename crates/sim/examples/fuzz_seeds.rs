//! Writes the fuzzer's seed inputs (`dualfs_sim::fuzz::seeds`) into
//! `<dir>/decode/`, `<dir>/image/`, `<dir>/stream/` and `<dir>/stream_structure/`: `scripts/fuzz seeds` runs it when a
//! target's corpus is empty.

fn main() -> std::io::Result<()> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".into()));
    let (decode, image) = dualfs_sim::fuzz::seeds();
    let stream = dualfs_sim::stream_fuzz::stream_seeds();
    let structure = dualfs_sim::stream_structure::structure_seeds();
    for (target, inputs) in [("decode", decode), ("image", image), ("stream", stream), ("stream_structure", structure)]
    {
        std::fs::create_dir_all(dir.join(target))?;
        for (i, bytes) in inputs.iter().enumerate() {
            std::fs::write(dir.join(target).join(format!("seed-{i:02}")), bytes)?;
        }
        println!("{target}: {} seeds", inputs.len());
    }
    Ok(())
}
