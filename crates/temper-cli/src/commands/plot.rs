//! `temper plot RUN_DIR...`: runs' `metrics.jsonl` as PNG charts, and an HTML page of them.
//!
//! An RL run gets four charts, each a line per series over steps (or policy versions for
//! evaluations): training reward (overall and per environment), held-out evaluation (mean
//! reward and pass@k per environment), engine–trainer mismatch KL on a log scale, and tokens/s of
//! the trainer and of rollout generation. An SFT run gets its training and validation loss, its
//! held-out evaluation when it has one, and tokens/s. Noisy per-step series are drawn raw (faint)
//! under an exponential moving average (`--smooth`, TensorBoard's debiased one). Several runs
//! overlay, each in its own colour, named in the legend. `--html` writes one page that holds the
//! charts, each run's config and its last evaluation, readable offline. Text is drawn with the
//! embedded DejaVu Sans, so no font library or installed font is needed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail, ensure};
use base64::Engine as _;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use temper_protocol::metrics::{self, EvalScores, MetricsLine, REWARD_MEAN};
use temper_protocol::run_dir;

use crate::args::PlotArgs;

const WIDTH: u32 = 1040;
const HEIGHT: u32 = 540;
/// The legend's panel, right of the plot, so it never covers a line.
const LEGEND_WIDTH: u32 = 260;
pub(crate) const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu Sans as [`FONT`].
pub(crate) fn register_font() -> anyhow::Result<()> {
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("the embedded font did not load"))
}

/// One line of a chart: points sorted by step, the last value of a step kept (a resumed run
/// may repeat one).
#[derive(Debug, Clone)]
struct Series {
    /// The legend's text; empty for a raw line under its smoothed one.
    label: String,
    points: Vec<(f64, f64)>,
    /// Palette index.
    colour: usize,
    /// Drawn faint: the raw values under a smoothed line.
    faint: bool,
}

/// One chart: what it shows and how.
#[derive(Debug)]
struct Chart {
    file: &'static str,
    title: String,
    x_label: &'static str,
    y_label: &'static str,
    log_y: bool,
    series: Vec<Series>,
}

/// One run: its name, metrics and config.
#[derive(Debug)]
struct Run {
    name: String,
    dir: PathBuf,
    lines: Vec<MetricsLine>,
}

impl Run {
    fn read(dir: &Path) -> anyhow::Result<Run> {
        let metrics = run_dir::metrics_file(dir);
        let text = std::fs::read_to_string(&metrics).with_context(|| {
            format!("cannot read {} (is it a run directory?)", metrics.display())
        })?;
        let (lines, bad) = metrics::parse_all(&text);
        if bad > 0 {
            // A run killed mid-write leaves a partial last line; say so, draw the rest.
            eprintln!("temper plot: skipped {bad} unreadable line(s) of {}", metrics.display());
        }
        let name = std::fs::canonicalize(dir)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Run { name, dir: dir.to_owned(), lines })
    }
}

pub fn run(args: &PlotArgs) -> anyhow::Result<()> {
    ensure!(
        (0.0..1.0).contains(&args.smooth),
        "--smooth must be in [0, 1) (the weight of the moving average; 0 draws raw values only), not {}",
        args.smooth
    );
    let mut runs =
        args.run_dirs.iter().map(|d| Run::read(d)).collect::<anyhow::Result<Vec<_>>>()?;
    // Two runs of the same folder name are told apart by their paths.
    let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
    for run in &mut runs {
        if names.iter().filter(|n| **n == run.name).count() > 1 {
            run.name = run.dir.display().to_string();
        }
    }
    let charts = charts(&runs, args.smooth);
    if charts.iter().all(|c| c.series.is_empty()) {
        let files: Vec<String> =
            runs.iter().map(|r| run_dir::metrics_file(&r.dir).display().to_string()).collect();
        bail!("{} has no step metrics yet", files.join(", "));
    }
    let out = match (&args.out, runs.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [one]) => one.dir.join("plots"),
        (None, _) => bail!("several runs: say where their charts go with --out DIR"),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    register_font()?;
    let mut drawn = Vec::new();
    for chart in &charts {
        if chart.series.is_empty() {
            println!("{}: no data ({})", chart.file, chart.title);
            continue;
        }
        let path = out.join(chart.file);
        draw(chart, &path).with_context(|| format!("cannot draw {}", path.display()))?;
        println!("{}", path.display());
        drawn.push((chart, path));
    }
    if args.html {
        let path = out.join("report.html");
        let page = html(&runs, &drawn)?;
        temper_protocol::fsio::write_atomic(&path, page.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// The values `value` takes per step over `lines` (the last of a step kept, NaN left out).
fn points(lines: &[MetricsLine], value: impl Fn(&MetricsLine) -> Option<f64>) -> Vec<(f64, f64)> {
    let mut by_step = BTreeMap::new();
    for l in lines {
        if let Some(v) = value(l).filter(|v| v.is_finite()) {
            by_step.insert(l.step(), v);
        }
    }
    by_step.into_iter().map(|(s, v)| (s as f64, v)).collect()
}

/// TensorBoard's smoothing: an exponential moving average with weight `w`, divided by
/// `1 − wⁿ` so the first points are not pulled toward zero.
fn smoothed(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    let (mut last, mut weight) = (0.0, 1.0);
    points
        .iter()
        .map(|&(x, y)| {
            last = last * w + (1.0 - w) * y;
            weight *= w;
            (x, last / (1.0 - weight))
        })
        .collect()
}

/// Collects a chart's lines: one per (run, series), coloured by its index.
struct Lines {
    series: Vec<Series>,
    several: bool,
    smooth: f64,
}

impl Lines {
    fn new(runs: &[Run], smooth: f64) -> Lines {
        Lines { series: Vec::new(), several: runs.len() > 1, smooth }
    }

    fn label(&self, run: &Run, what: &str) -> String {
        match (self.several, what.is_empty()) {
            (false, _) => what.to_owned(),
            (true, true) => run.name.clone(),
            (true, false) => format!("{} · {what}", run.name),
        }
    }

    /// A line as it is.
    fn add(&mut self, run: &Run, what: &str, points: Vec<(f64, f64)>) {
        if !points.is_empty() {
            let colour = self.series.iter().filter(|s| !s.faint).count();
            self.series.push(Series { label: self.label(run, what), points, colour, faint: false });
        }
    }

    /// A noisy line: raw and faint, under its moving average (raw only without smoothing or
    /// with too few points to smooth).
    fn add_smoothed(&mut self, run: &Run, what: &str, points: Vec<(f64, f64)>) {
        if self.smooth == 0.0 || points.len() < 3 {
            return self.add(run, what, points);
        }
        let colour = self.series.iter().filter(|s| !s.faint).count();
        let average = smoothed(&points, self.smooth);
        self.series.push(Series { label: String::new(), points, colour, faint: true });
        self.series.push(Series {
            label: self.label(run, what),
            points: average,
            colour,
            faint: false,
        });
    }
}

/// Training reward: overall, and per environment when there are several (one run only).
fn reward_series(runs: &[Run], smooth: f64) -> Vec<Series> {
    use MetricsLine::Orchestrator;
    let mut out = Lines::new(runs, smooth);
    for run in runs {
        let lines = &run.lines;
        let all = points(lines, |l| match l {
            Orchestrator(o) => Some(o.metrics.reward_mean),
            _ => None,
        });
        out.add_smoothed(run, if out.several { "" } else { "all" }, all);
        let envs: std::collections::BTreeSet<&String> = lines
            .iter()
            .filter_map(|l| if let Orchestrator(o) = l { Some(o.env_reward.keys()) } else { None })
            .flatten()
            .collect();
        if envs.len() > 1 && !out.several {
            for env in envs {
                let p = points(lines, |l| match l {
                    Orchestrator(o) => o.env_reward.get(env.as_str()).copied(),
                    _ => None,
                });
                out.add_smoothed(run, env, p);
            }
        }
    }
    out.series
}

/// Held-out evaluation per environment: its mean reward, then (one run only) its pass@k, in
/// name order.
fn eval_series(runs: &[Run]) -> Vec<Series> {
    let mut out = Lines::new(runs, 0.0);
    for run in runs {
        let lines = &run.lines;
        let mut stats: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
        for l in lines {
            if let MetricsLine::Eval(e) = l {
                for (env, stat, _) in e.entries() {
                    if stat == REWARD_MEAN || (stat.starts_with("pass@") && !out.several) {
                        stats.entry(env).or_default().insert(stat);
                    }
                }
            }
        }
        for (env, stats) in stats {
            let mut ordered: Vec<&str> = stats.into_iter().collect();
            ordered.sort_by_key(|s| *s != REWARD_MEAN);
            for stat in ordered {
                let label = if stat == REWARD_MEAN {
                    format!("{env} mean reward")
                } else {
                    format!("{env} {stat}")
                };
                let p = points(lines, |l| match l {
                    MetricsLine::Eval(e) => e.get(env, stat),
                    _ => None,
                });
                out.add(run, &label, p);
            }
        }
    }
    out.series
}

/// SFT's loss: training (smoothed) and validation.
fn loss_series(runs: &[Run], smooth: f64) -> Vec<Series> {
    let mut out = Lines::new(runs, smooth);
    for run in runs {
        let train = points(&run.lines, |l| match l {
            MetricsLine::Sft(s) if !s.skipped => Some(s.loss),
            _ => None,
        });
        out.add_smoothed(run, "training", train);
        let validation = points(&run.lines, |l| match l {
            MetricsLine::Eval(e) => e.loss,
            _ => None,
        });
        out.add(run, "validation", validation);
    }
    out.series
}

fn charts(runs: &[Run], smooth: f64) -> Vec<Chart> {
    use MetricsLine::{Orchestrator, Sft, Trainer};
    let named = |what: &str| match runs {
        [one] => format!("{what} — {}", one.name),
        _ => format!("{what} — {} runs", runs.len()),
    };
    let mut kl = Lines::new(runs, 0.0);
    let mut throughput = Lines::new(runs, smooth);
    for run in runs {
        let mut p = points(&run.lines, |l| match l {
            Trainer(t) => Some(t.mismatch_kl),
            _ => None,
        });
        // A log axis has no zero: on-policy steps can be exactly 0.
        for point in &mut p {
            point.1 = point.1.max(1e-16);
        }
        kl.add(run, "mismatch_kl", p);
        let trainer = points(&run.lines, |l| match l {
            Trainer(t) => Some(t.update.tokens_per_s),
            Sft(s) => Some(s.tokens_per_s),
            _ => None,
        });
        throughput.add_smoothed(run, "trainer", trainer);
        let rollouts = points(&run.lines, |l| match l {
            Orchestrator(o) => Some(o.metrics.tokens_per_s),
            _ => None,
        });
        throughput.add_smoothed(run, "rollouts", rollouts);
    }
    let rl = runs.iter().any(|r| r.lines.iter().any(|l| matches!(l, Orchestrator(_) | Trainer(_))));
    let sft = runs.iter().any(|r| r.lines.iter().any(|l| matches!(l, Sft(_))));
    let mut charts = Vec::new();
    if sft || !rl {
        charts.push(Chart {
            file: "loss.png",
            title: named("SFT loss"),
            x_label: "step",
            y_label: "loss (mean NLL per token)",
            log_y: false,
            series: loss_series(runs, smooth),
        });
    }
    if rl || !sft {
        charts.push(Chart {
            file: "reward.png",
            title: named("Training reward (mean per step)"),
            x_label: "step",
            y_label: "reward",
            log_y: false,
            series: reward_series(runs, smooth),
        });
    }
    charts.push(Chart {
        file: "eval.png",
        title: named("Held-out evaluation"),
        x_label: if rl { "policy version (step)" } else { "step" },
        y_label: "score",
        log_y: false,
        series: eval_series(runs),
    });
    if rl || !sft {
        charts.push(Chart {
            file: "mismatch_kl.png",
            title: named("Engine vs trainer: mismatch KL"),
            x_label: "step",
            y_label: "KL (log scale)",
            log_y: true,
            series: kl.series,
        });
    }
    charts.push(Chart {
        file: "throughput.png",
        title: named("Throughput"),
        x_label: "step",
        y_label: "tokens/s",
        log_y: false,
        series: throughput.series,
    });
    charts
}

/// The ranges that hold every point, padded so lines do not sit on the frame.
fn bounds(chart: &Chart) -> ((f64, f64), (f64, f64)) {
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    let fold = |f: fn(&(f64, f64)) -> f64| {
        pts().map(f).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    let (x0, x1) = fold(|p| p.0);
    let (y0, y1) = fold(|p| p.1);
    let x = if x1 > x0 { (x0, x1) } else { (x0 - 1.0, x1 + 1.0) };
    let y = if chart.log_y {
        (y0 / 2.0, y1 * 2.0)
    } else {
        let pad = if y1 > y0 { (y1 - y0) * 0.05 } else { y0.abs().max(1.0) * 0.1 };
        (y0 - pad, y1 + pad)
    };
    (x, y)
}

/// A tick label with as many decimals as the axis' span needs: `9000`, not `9000.0`; `0.25`.
fn tick(v: f64, span: f64) -> String {
    let decimals = if span >= 20.0 {
        0
    } else if span >= 2.0 {
        1
    } else if span >= 0.2 {
        2
    } else {
        3
    };
    let text = format!("{v:.decimals$}");
    if text.starts_with('-') && text.trim_start_matches(['-', '0', '.']).is_empty() {
        text[1..].to_owned()
    } else {
        text
    }
}

fn draw(chart: &Chart, path: &Path) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let mut builder = ChartBuilder::on(&plot);
    builder
        .caption(&chart.title, (FONT, 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72);
    // Steps are whole numbers: no more x labels than steps, none between two.
    let x_format = move |v: &f64| tick(*v, (x1 - x0).max(20.0));
    let x_labels = ((x1 - x0).round() as usize + 1).clamp(2, 10);
    if chart.log_y {
        let c = builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale())?;
        plot_lines(c, chart, x_labels, &x_format, &|v: &f64| format!("{v:.0e}"))?;
    } else {
        let c = builder.build_cartesian_2d(x0..x1, y0..y1)?;
        plot_lines(c, chart, x_labels, &x_format, &move |v: &f64| tick(*v, y1 - y0))?;
    }
    draw_legend(&legend, chart)?;
    root.present()?;
    Ok(())
}

fn style(s: &Series) -> ShapeStyle {
    let colour = Palette99::pick(s.colour);
    if s.faint { colour.mix(0.25).stroke_width(1) } else { colour.stroke_width(2) }
}

/// Axes and one line per series (short series also get a mark per point: a single point
/// draws no line), on a linear or logarithmic y axis.
fn plot_lines<'a, DB, Y>(
    mut c: ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    chart: &Chart,
    x_labels: usize,
    x_format: &dyn Fn(&f64) -> String,
    y_format: &dyn Fn(&f64) -> String,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    c.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_labels(x_labels)
        .x_label_formatter(x_format)
        .y_label_formatter(y_format)
        .label_style((FONT, 14))
        .draw()?;
    for s in &chart.series {
        c.draw_series(LineSeries::new(s.points.iter().copied(), style(s)))?;
        if s.points.len() <= 30 && !s.faint {
            let colour = Palette99::pick(s.colour).filled();
            c.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, colour)))?;
        }
    }
    Ok(())
}

/// The legend in its own panel: a line sample and the label of every named series.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let text = TextStyle::from((FONT, 14).into_font()).color(&BLACK);
    let mut y = 60;
    for s in chart.series.iter().filter(|s| !s.label.is_empty()) {
        area.draw(&PathElement::new(vec![(8, y), (32, y)], style(s)))?;
        let mut label = s.label.clone();
        // Cut from the left: runs told apart by their paths differ at the end.
        let n = label.chars().count();
        if n > 30 {
            label = "…".to_owned() + &label.chars().skip(n - 29).collect::<String>();
        }
        area.draw(&Text::new(label, (40, y - 8), text.clone()))?;
        y += 22;
    }
    Ok(())
}

/// One page for a browser, offline: the charts (inline), and per run its config and its last
/// held-out evaluation.
fn html(runs: &[Run], charts: &[(&Chart, PathBuf)]) -> anyhow::Result<String> {
    let mut page = String::new();
    let title = match runs {
        [one] => format!("temper run {}", one.name),
        _ => format!(
            "temper runs: {}",
            runs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    };
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n\
         <style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
         img{{max-width:100%;border:1px solid #ddd;margin:.5em 0}}\
         table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style>\n\
         </head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    page.push_str("<h2>Charts</h2>\n");
    for (chart, path) in charts {
        let png = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let data = base64::engine::general_purpose::STANDARD.encode(png);
        let _ = writeln!(
            page,
            "<figure><img alt=\"{}\" src=\"data:image/png;base64,{data}\"></figure>",
            escape(&chart.title)
        );
    }
    for run in runs {
        let _ = writeln!(
            page,
            "<h2>{}</h2>\n<p><code>{}</code></p>",
            escape(&run.name),
            escape(&run.dir.display().to_string())
        );
        if let Some(eval) = run.lines.iter().rev().find_map(|l| match l {
            MetricsLine::Eval(e) if !e.scores.is_empty() || e.loss.is_some() => Some(e),
            _ => None,
        }) {
            page.push_str(&eval_table(eval));
        }
        let config = run.dir.join("config.toml");
        match std::fs::read_to_string(&config) {
            Ok(text) => {
                let _ = writeln!(
                    page,
                    "<details open><summary>config.toml</summary><pre>{}</pre></details>",
                    escape(&text)
                );
            }
            Err(_) => page.push_str("<p>No config.toml in the run folder.</p>\n"),
        }
    }
    page.push_str("</body></html>\n");
    Ok(page)
}

/// The last evaluation of a run as a table: a row per environment, a column per statistic.
fn eval_table(eval: &EvalScores) -> String {
    let mut stats: Vec<&str> = eval.entries().map(|(_, s, _)| s).collect();
    stats.sort_unstable();
    stats.dedup();
    stats.sort_by_key(|s| *s != REWARD_MEAN);
    let mut t = format!("<h3>Last evaluation (step {})</h3>\n", eval.step);
    if !stats.is_empty() {
        t.push_str("<table><tr><th>environment</th>");
        for s in &stats {
            let _ = write!(t, "<th>{}</th>", escape(s));
        }
        t.push_str("</tr>\n");
        for (env, values) in eval.scores.iter().filter(|(_, v)| !v.is_empty()) {
            let _ = write!(t, "<tr><td>{}</td>", escape(env));
            for s in &stats {
                match values.get(*s) {
                    Some(v) => {
                        let _ = write!(t, "<td>{v:.4}</td>");
                    }
                    None => t.push_str("<td></td>"),
                }
            }
            t.push_str("</tr>\n");
        }
        t.push_str("</table>\n");
    }
    if let Some(loss) = eval.loss {
        let _ = writeln!(t, "<p>validation loss {loss:.4}</p>");
    }
    t
}

/// Text as HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"{"step":1,"role":"orchestrator","reward/mean":0.1,"reward/a/mean":0.2,"reward/b/mean":0.0,"throughput/tokens_per_s":50.0}
{"step":1,"role":"trainer","mismatch_kl/mean":0.0,"throughput/tokens_per_s":900.0}
{"step":0,"role":"orchestrator","eval/a/reward/mean":0.3,"eval/a/pass@1":0.2,"eval/a/pass@4":0.5}
{"step":2,"role":"orchestrator","reward/mean":0.4,"reward/a/mean":0.5,"reward/b/mean":0.3}
{"step":2,"role":"orchestrator","reward/mean":0.5}
{"step":2,"role":"trainer","mismatch_kl/mean":2e-4}
{"step":3,"role":"trai"#;

    fn run(text: &str, name: &str) -> Run {
        let (lines, _) = metrics::parse_all(text);
        Run { name: name.into(), dir: PathBuf::from(name), lines }
    }

    #[test]
    fn series_per_env_last_value_per_step_and_a_floor_for_the_log_axis() {
        let (lines, bad) = metrics::parse_all(METRICS);
        assert_eq!((lines.len(), bad), (6, 1));
        let charts = charts(&[run(METRICS, "r1")], 0.0);
        let get = |file: &str| charts.iter().find(|c| c.file == file).expect(file);
        assert_eq!(
            charts.iter().map(|c| c.file).collect::<Vec<_>>(),
            ["reward.png", "eval.png", "mismatch_kl.png", "throughput.png"]
        );
        assert_eq!(get("reward.png").title, "Training reward (mean per step) — r1");
        let reward = &get("reward.png").series;
        let labels: Vec<&str> = reward.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["all", "a", "b"]);
        // The repeated step 2 keeps its last value.
        assert_eq!(reward[0].points, [(1.0, 0.1), (2.0, 0.5)]);
        let eval: Vec<&str> = get("eval.png").series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(eval, ["a mean reward", "a pass@1", "a pass@4"]);
        assert_eq!(get("mismatch_kl.png").series[0].points, [(1.0, 1e-16), (2.0, 2e-4)]);
        let tp: Vec<&str> = get("throughput.png").series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(tp, ["trainer", "rollouts"]);
    }

    #[test]
    fn sft_runs_get_their_loss_and_several_runs_overlay() {
        let sft = r#"{"step":1,"role":"sft","loss/mean":4.0,"throughput/tokens_per_s":100.0}
{"step":2,"role":"sft","loss/mean":2.0,"throughput/tokens_per_s":120.0}
{"step":3,"role":"sft","loss/mean":1.0,"throughput/tokens_per_s":110.0}
{"step":3,"kind":"eval","role":"sft","eval/loss":1.5}"#;
        let one = charts(&[run(sft, "s")], 0.5);
        assert_eq!(
            one.iter().map(|c| c.file).collect::<Vec<_>>(),
            ["loss.png", "eval.png", "throughput.png"]
        );
        let loss = &one[0].series;
        // Raw (faint, unlabelled) under its average, then the validation points.
        assert_eq!(loss.len(), 3);
        assert!(loss[0].faint && loss[0].label.is_empty());
        assert_eq!(loss[0].points, [(1.0, 4.0), (2.0, 2.0), (3.0, 1.0)]);
        assert_eq!((loss[1].label.as_str(), loss[1].faint), ("training", false));
        assert_eq!(loss[2].label, "validation");
        assert_eq!(loss[2].points, [(3.0, 1.5)]);
        // Overlaid, each run is named and coloured apart; the title counts the runs.
        let two = charts(&[run(sft, "a"), run(sft, "b")], 0.0);
        assert_eq!(two[0].title, "SFT loss — 2 runs");
        let labels: Vec<&str> = two[0].series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["a · training", "a · validation", "b · training", "b · validation"]);
        let colours: Vec<usize> = two[0].series.iter().map(|s| s.colour).collect();
        assert_eq!(colours, [0, 1, 2, 3]);
    }

    #[test]
    fn smoothing_is_tensorboards_debiased_average() {
        // w = 0.5: 4 → 4; then (0.5·2 + 0.5·2)/(1 − 0.25) = 3 · …  by hand:
        // m1 = 0.5·4 = 2, /0.5 = 4; m2 = 0.5·2 + 0.5·2 = 2, /0.75 = 8/3; m3 = 1 + 0.5 = 1.5, /0.875.
        let s = smoothed(&[(1.0, 4.0), (2.0, 2.0), (3.0, 1.0)], 0.5);
        let want = [4.0, 8.0 / 3.0, 1.5 / 0.875];
        for (got, want) in s.iter().zip(want) {
            assert!((got.1 - want).abs() < 1e-12, "{got:?} vs {want}");
        }
        assert_eq!(smoothed(&[(1.0, 7.0)], 0.9), [(1.0, 7.0)]);
    }

    #[test]
    fn ticks_carry_the_decimals_the_span_needs() {
        assert_eq!(tick(9000.0, 4000.0), "9000");
        assert_eq!(tick(0.25, 1.0), "0.25");
        assert_eq!(tick(1.5, 10.0), "1.5");
        assert_eq!(tick(-0.0001, 1.0), "0.00");
        assert_eq!(tick(0.0125, 0.1), "0.013");
    }

    #[test]
    fn html_escapes_what_it_is_given() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn bounds_pad_flat_and_single_point_series() {
        let chart = |log_y, points: Vec<(f64, f64)>| Chart {
            file: "x.png",
            title: String::new(),
            x_label: "",
            y_label: "",
            log_y,
            series: vec![Series { label: "s".into(), points, colour: 0, faint: false }],
        };
        assert_eq!(bounds(&chart(false, vec![(3.0, 0.5)])), ((2.0, 4.0), (0.4, 0.6)));
        assert_eq!(
            bounds(&chart(true, vec![(1.0, 1e-4), (2.0, 1e-2)])),
            ((1.0, 2.0), (5e-5, 2e-2))
        );
    }
}
