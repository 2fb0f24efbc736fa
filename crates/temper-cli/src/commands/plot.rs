//! `temper plot RUN_DIR`: a run's `metrics.jsonl` as PNG charts.
//!
//! Four charts, each a line per series over steps (or policy versions for evaluations):
//! training reward (overall and per environment), held-out evaluation (mean reward and pass@k
//! per environment), engine–trainer mismatch KL on a log scale, and tokens/s of the trainer and
//! of rollout generation. Text is drawn with the embedded DejaVu Sans, so no font library or
//! installed font is needed.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use temper_protocol::metrics::{self, MetricsLine, REWARD_MEAN};
use temper_protocol::run_dir;

use crate::args::PlotArgs;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;
pub(crate) const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu Sans as [`FONT`].
pub(crate) fn register_font() -> anyhow::Result<()> {
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("the embedded font did not load"))
}

/// One line of a chart: points sorted by step, the last value of a step kept (a resumed run
/// may repeat one).
#[derive(Debug)]
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

/// One chart: what it shows and how.
#[derive(Debug)]
struct Chart {
    file: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    log_y: bool,
    series: Vec<Series>,
}

pub fn run(args: PlotArgs) -> anyhow::Result<()> {
    let metrics = run_dir::metrics_file(&args.run_dir);
    let text = std::fs::read_to_string(&metrics)
        .with_context(|| format!("cannot read {} (is it a run directory?)", metrics.display()))?;
    let (lines, bad) = metrics::parse_all(&text);
    if bad > 0 {
        // A run killed mid-write leaves a partial last line; say so, draw the rest.
        eprintln!("temper plot: skipped {bad} unreadable line(s) of {}", metrics.display());
    }
    let charts = charts(&lines);
    if charts.iter().all(|c| c.series.is_empty()) {
        bail!("{} has no step metrics yet", metrics.display());
    }
    let out = args.out.unwrap_or_else(|| args.run_dir.join("plots"));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    register_font()?;
    let mut stdout = std::io::stdout().lock();
    for chart in &charts {
        use std::io::Write as _;
        if chart.series.is_empty() {
            writeln!(stdout, "{}: no data ({})", chart.file, chart.title)?;
            continue;
        }
        let path = out.join(chart.file);
        draw(chart, &path).with_context(|| format!("cannot draw {}", path.display()))?;
        writeln!(stdout, "{}", path.display())?;
    }
    Ok(())
}

/// The values `value` takes per step over `lines` (the last of a step kept, NaN left out).
fn series(
    lines: &[MetricsLine],
    label: &str,
    value: impl Fn(&MetricsLine) -> Option<f64>,
) -> Option<Series> {
    let mut by_step = BTreeMap::new();
    for l in lines {
        if let Some(v) = value(l).filter(|v| v.is_finite()) {
            by_step.insert(l.step(), v);
        }
    }
    (!by_step.is_empty()).then(|| Series {
        label: label.to_owned(),
        points: by_step.into_iter().map(|(s, v)| (s as f64, v)).collect(),
    })
}

/// Training reward: overall, and per environment when there are several.
fn reward_series(lines: &[MetricsLine]) -> Vec<Series> {
    use MetricsLine::Orchestrator;
    let mut reward: Vec<Series> = series(lines, "all", |l| match l {
        Orchestrator(o) => Some(o.metrics.reward_mean),
        _ => None,
    })
    .into_iter()
    .collect();
    let envs: std::collections::BTreeSet<&String> = lines
        .iter()
        .filter_map(|l| if let Orchestrator(o) = l { Some(o.env_reward.keys()) } else { None })
        .flatten()
        .collect();
    if envs.len() > 1 {
        for env in envs {
            reward.extend(series(lines, env, |l| match l {
                Orchestrator(o) => o.env_reward.get(env.as_str()).copied(),
                _ => None,
            }));
        }
    }
    reward
}

/// Held-out evaluation per environment: its mean reward, then its pass@k, in name order.
fn eval_series(lines: &[MetricsLine]) -> Vec<Series> {
    let mut stats: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for l in lines {
        if let MetricsLine::Eval(e) = l {
            for (env, stat, _) in e.entries() {
                if stat == REWARD_MEAN || stat.starts_with("pass@") {
                    stats.entry(env).or_default().insert(stat);
                }
            }
        }
    }
    let mut eval = Vec::new();
    for (env, stats) in stats {
        let mut ordered: Vec<&str> = stats.into_iter().collect();
        ordered.sort_by_key(|s| *s != REWARD_MEAN);
        for stat in ordered {
            let label = if stat == REWARD_MEAN {
                format!("{env} mean reward")
            } else {
                format!("{env} {stat}")
            };
            eval.extend(series(lines, &label, |l| match l {
                MetricsLine::Eval(e) => e.get(env, stat),
                _ => None,
            }));
        }
    }
    eval
}

fn charts(lines: &[MetricsLine]) -> Vec<Chart> {
    use MetricsLine::{Orchestrator, Trainer};
    let (reward, eval) = (reward_series(lines), eval_series(lines));
    let mut kl: Vec<Series> = series(lines, "mismatch_kl", |l| match l {
        Trainer(t) => Some(t.mismatch_kl),
        _ => None,
    })
    .into_iter()
    .collect();
    for s in &mut kl {
        // A log axis has no zero: on-policy steps can be exactly 0.
        for p in &mut s.points {
            p.1 = p.1.max(1e-16);
        }
    }
    let throughput: Vec<Series> = [
        series(lines, "trainer", |l| match l {
            Trainer(t) => Some(t.update.tokens_per_s),
            _ => None,
        }),
        series(lines, "rollouts", |l| match l {
            Orchestrator(o) => Some(o.metrics.tokens_per_s),
            _ => None,
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    vec![
        Chart {
            file: "reward.png",
            title: "Training reward (mean per step)",
            x_label: "step",
            y_label: "reward",
            log_y: false,
            series: reward,
        },
        Chart {
            file: "eval.png",
            title: "Held-out evaluation",
            x_label: "policy version (step)",
            y_label: "score",
            log_y: false,
            series: eval,
        },
        Chart {
            file: "mismatch_kl.png",
            title: "Engine vs trainer: mismatch KL",
            x_label: "step",
            y_label: "KL (log scale)",
            log_y: true,
            series: kl,
        },
        Chart {
            file: "throughput.png",
            title: "Throughput",
            x_label: "step",
            y_label: "tokens/s",
            log_y: false,
            series: throughput,
        },
    ]
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

fn draw(chart: &Chart, path: &Path) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let mut builder = ChartBuilder::on(&root);
    builder.caption(chart.title, (FONT, 24)).margin(16).x_label_area_size(44).y_label_area_size(72);
    if chart.log_y {
        let c = builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale())?;
        plot_lines(c, chart, Some(&|v: &f64| format!("{v:.0e}")))?;
    } else {
        plot_lines(builder.build_cartesian_2d(x0..x1, y0..y1)?, chart, None)?;
    }
    root.present()?;
    Ok(())
}

/// Axes, one line per series (short series also get a mark per point: a single point draws no
/// line) and the legend, on a linear or logarithmic y axis.
fn plot_lines<'a, DB, Y>(
    mut c: ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    chart: &Chart,
    y_format: Option<&dyn Fn(&f64) -> String>,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = c.configure_mesh();
    mesh.x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 14));
    if let Some(f) = y_format {
        mesh.y_label_formatter(f);
    }
    mesh.draw()?;
    let style = |i: usize| Palette99::pick(i).stroke_width(2);
    for (i, s) in chart.series.iter().enumerate() {
        c.draw_series(LineSeries::new(s.points.iter().copied(), style(i)))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style(i)));
        if s.points.len() <= 30 {
            c.draw_series(
                s.points.iter().map(|&p| Circle::new(p, 3, Palette99::pick(i).filled())),
            )?;
        }
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    Ok(())
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

    #[test]
    fn series_per_env_last_value_per_step_and_a_floor_for_the_log_axis() {
        let (lines, bad) = metrics::parse_all(METRICS);
        assert_eq!((lines.len(), bad), (6, 1));
        let charts = charts(&lines);
        let get = |file: &str| charts.iter().find(|c| c.file == file).expect(file);
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
    fn bounds_pad_flat_and_single_point_series() {
        let chart = |log_y, points: Vec<(f64, f64)>| Chart {
            file: "x.png",
            title: "",
            x_label: "",
            y_label: "",
            log_y,
            series: vec![Series { label: "s".into(), points }],
        };
        assert_eq!(bounds(&chart(false, vec![(3.0, 0.5)])), ((2.0, 4.0), (0.4, 0.6)));
        assert_eq!(
            bounds(&chart(true, vec![(1.0, 1e-4), (2.0, 1e-2)])),
            ((1.0, 2.0), (5e-5, 2e-2))
        );
    }
}
