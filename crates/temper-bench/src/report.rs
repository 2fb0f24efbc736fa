//! The statistics and the report file every benchmark shares.

use std::path::Path;

use anyhow::Context;

/// The median of `v` (the upper one of an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// The `p` quantile (0..=1) of ascending `sorted` (nearest rank); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Writes `report` as pretty JSON to `path` (creating its folder) and says where.
pub fn write(path: &Path, report: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let bytes = serde_json::to_vec_pretty(report)?;
    temper_protocol::fsio::write_atomic(path, &bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("\nwrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles_by_hand() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
        let sorted: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), 51.0);
        assert_eq!(percentile(&sorted, 0.99), 100.0);
        assert_eq!(percentile(&sorted, 1.0), 101.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_report_is_written_whole_with_its_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a/b/report.json");
        write(&path, &serde_json::json!({"x": 1})).unwrap();
        let back: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back["x"], 1);
    }
}
