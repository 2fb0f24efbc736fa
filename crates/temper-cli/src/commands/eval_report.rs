//! `temper eval report RUN...`: every benchmark of one or more evaluation runs side by side, as
//! Markdown (printed and written), JSON and a PNG bar chart of avg@k with 95% intervals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, ensure};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use temper_envs::report::{Report, Run, report};

use super::plot::{FONT, register_font};
use crate::args::EvalReportArgs;

/// The report's file names.
pub const MARKDOWN: &str = "report.md";
/// See [`MARKDOWN`].
pub const JSON: &str = "report.json";
/// See [`MARKDOWN`].
pub const CHART: &str = "avg_at_k.png";

/// What [`write`] wrote.
pub struct Written {
    /// The Markdown table.
    pub markdown: String,
}

pub fn run(args: &EvalReportArgs) -> anyhow::Result<()> {
    ensure!(
        args.labels.is_empty() || args.labels.len() == args.runs.len(),
        "--label was given {} times for {} runs: give one per run, in order, or none",
        args.labels.len(),
        args.runs.len()
    );
    let mut runs = Vec::new();
    for (i, dir) in args.runs.iter().enumerate() {
        runs.push(Run::read(dir, args.labels.get(i).cloned())?);
    }
    if args.labels.is_empty() {
        distinct_labels(&mut runs);
    }
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None if runs.len() == 1 => runs[0].dir.join("report"),
        None => {
            let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            PathBuf::from("outputs").join("reports").join(stamp.to_string())
        }
    };
    let written = write(&report(&runs), &out)?;
    print!("{}", written.markdown);
    println!();
    for file in [MARKDOWN, JSON, CHART] {
        println!("{}", out.join(file).display());
    }
    Ok(())
}

/// Runs called by the same model name get their folder's name after it.
fn distinct_labels(runs: &mut [Run]) {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for r in runs.iter() {
        *count.entry(r.label.clone()).or_default() += 1;
    }
    for r in runs.iter_mut() {
        if count[&r.label] > 1 {
            let folder = r.dir.file_name().map(|n| n.to_string_lossy().into_owned());
            r.label =
                format!("{} ({})", r.label, folder.unwrap_or_else(|| r.dir.display().to_string()));
        }
    }
}

/// Writes report.md, report.json and avg_at_k.png to `out`.
pub fn write(report: &Report, out: &Path) -> anyhow::Result<Written> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let markdown = report.markdown();
    let put = |name: &str, bytes: &[u8]| {
        let path = out.join(name);
        temper_protocol::fsio::write_atomic(&path, bytes)
            .with_context(|| format!("cannot write {}", path.display()))
    };
    put(MARKDOWN, markdown.as_bytes())?;
    put(JSON, &serde_json::to_vec_pretty(report)?)?;
    let chart = out.join(CHART);
    draw(report, &chart).with_context(|| format!("cannot draw {}", chart.display()))?;
    Ok(Written { markdown })
}

/// A bar per run and benchmark: avg@k in percent, with its 95% interval as an error bar.
fn draw(report: &Report, path: &Path) -> anyhow::Result<()> {
    register_font()?;
    let runs: Vec<&str> = report.runs.iter().map(|(label, _)| label.as_str()).collect();
    let n = report.benchmarks.len().max(1);
    let width = (160 * n as u32 + 200).clamp(640, 1600);
    let root = BitMapBackend::new(path, (width, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("avg@k by benchmark (bars: 95% intervals over problems)", (FONT, 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..100f64)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("avg@k (%)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 14))
        .draw()?;
    let slot = 0.8 / runs.len().max(1) as f64;
    for (r, label) in runs.iter().enumerate() {
        let color = Palette99::pick(r);
        let mut bars = Vec::new();
        let mut whiskers = Vec::new();
        let mut values = Vec::new();
        for (i, b) in report.benchmarks.iter().enumerate() {
            let Some(s) = b.runs.iter().find(|s| s.run == *label) else { continue };
            let Some(e) = s.avg_at_k else { continue };
            let x0 = i as f64 - 0.4 + slot * r as f64;
            let (x1, mid) = (x0 + slot * 0.9, x0 + slot * 0.45);
            let y = 100.0 * e.mean;
            bars.push(Rectangle::new([(x0, 0.0), (x1, y)], color.filled()));
            if e.low.is_finite() && e.high.is_finite() {
                let (lo, hi) =
                    ((100.0 * e.low).clamp(0.0, 100.0), (100.0 * e.high).clamp(0.0, 100.0));
                let cap = slot * 0.15;
                for seg in [
                    vec![(mid, lo), (mid, hi)],
                    vec![(mid - cap, lo), (mid + cap, lo)],
                    vec![(mid - cap, hi), (mid + cap, hi)],
                ] {
                    whiskers.push(PathElement::new(seg, BLACK.stroke_width(2)));
                }
            }
            let top = if e.high.is_finite() { y.max((100.0 * e.high).min(100.0)) } else { y };
            values.push(Text::new(
                format!("{:.1}", y + 0.0),
                (mid, top + 1.0),
                (FONT, 13).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom)),
            ));
        }
        chart
            .draw_series(bars)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        chart.draw_series(whiskers)?;
        chart.draw_series(values)?;
    }
    // The benchmarks' names under their groups of bars.
    for (i, b) in report.benchmarks.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, 0.0));
        root.draw(&Text::new(
            b.name.clone(),
            (px, py + 8),
            (FONT, 15).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
