//! SVG charts of a run (plotters, SVG backend only): the fault-free
//! lock + unlock latency CDF of the four contenders, and the p50 of every
//! fault case as grouped bars on a log scale. A full run of every case
//! writes them into `docs/`; a quick or partial one into `target/bench/`,
//! so such runs leave the committed charts alone.

use std::path::{Path, PathBuf};

use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use serde_json::{json, Value};

use crate::contenders::ALL;
use crate::settings::target_dir;
use crate::{BoxError, Measured, Run};

pub(crate) const CDF_FILE: &str = "bench-latency-cdf.svg";
pub(crate) const FAULTS_FILE: &str = "bench-faults-p50.svg";

const COLORS: [RGBColor; 4] = [
    RGBColor(120, 120, 120), // floor
    RGBColor(31, 119, 180),  // quorumlock
    RGBColor(214, 39, 40),   // rslock
    RGBColor(44, 160, 44),   // limit
];

/// Bar slots per fault case: one per contender and a gap.
const SLOTS: usize = COLORS.len() + 1;

/// `docs/` for a full run of every case, else `target/bench/`.
fn out_dir(r: &Run) -> PathBuf {
    let full = !r.s.quick
        && r.s.fault_only.is_none()
        && crate::settings::CASES.iter().all(|c| r.s.runs(c));
    if full {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs")
    } else {
        target_dir().join("bench")
    }
}

/// Writes the charts it has data for; returns their paths.
pub(crate) fn write_all(r: &Run, m: &mut Measured) -> Result<Value, BoxError> {
    let dir = out_dir(r);
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    let mut samples: Vec<Vec<u64>> = m.res.iter().map(|x| x.unc_ns.clone()).collect();
    if samples.iter().all(Vec::is_empty) {
        // Without the uncontended case, the faults' fault-free baseline.
        if let Some(c) = m.faults.as_ref().and_then(|f| f.cases.first()) {
            samples = c.res.iter().map(|x| x.unc_ns.clone()).collect();
        }
    }
    if samples.iter().any(|s| !s.is_empty()) {
        let path = dir.join(CDF_FILE);
        cdf(&path, &mut samples)?;
        files.push(path.display().to_string());
    }
    if let Some(f) = m.faults.as_mut() {
        let path = dir.join(FAULTS_FILE);
        fault_bars(&path, &f.p50s(), f.node_timeout.as_millis())?;
        files.push(path.display().to_string());
    }
    for f in &files {
        eprintln!("wrote {f}");
    }
    Ok(json!(files))
}

/// Cumulative share of samples (ns) at or below each latency, in µs; at
/// most about 1,000 points per line, up to the 99.9th percentile.
fn cdf_points(sorted: &[u64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let cut = ((n as f64) * 0.999).ceil() as usize;
    let step = (n / 1000).max(1);
    (0..cut.min(n))
        .step_by(step)
        .chain(std::iter::once(cut.min(n).saturating_sub(1)))
        .map(|i| (sorted[i] as f64 / 1e3, (i + 1) as f64 / n as f64))
        .collect()
}

fn cdf(path: &Path, samples: &mut [Vec<u64>]) -> Result<(), BoxError> {
    let lines: Vec<Vec<(f64, f64)>> = samples
        .iter_mut()
        .map(|s| {
            s.sort_unstable();
            cdf_points(s)
        })
        .collect();
    let xs = lines.iter().flatten().map(|p| p.0);
    let lo = xs.clone().fold(f64::INFINITY, f64::min) * 0.9;
    let hi = xs.fold(0.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Uncontended lock+unlock latency, fault-free (CDF to p99.9)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(key_points(lo, hi)),
            0.0..1.0,
        )?;
    chart
        .configure_mesh()
        .x_desc("lock + unlock latency (µs, log scale)")
        .y_desc("share of cycles at or below")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
        .label_style(("sans-serif", 15))
        .draw()?;
    for (who, pts) in ALL.iter().zip(lines) {
        let color = COLORS[who.index()];
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
            .label(who.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Grouped bars: one group per fault case, one bar per contender, p50 in
/// ms on a log scale, with the value above each bar.
fn fault_bars(
    path: &Path,
    groups: &[(&'static str, [Option<f64>; 4])],
    timeout_ms: u128,
) -> Result<(), BoxError> {
    let values = groups.iter().flat_map(|g| g.1).flatten();
    let lo = values.clone().fold(f64::INFINITY, f64::min).min(1.0) / 2.0;
    let hi = values.fold(0.0, f64::max).max(1.0) * 3.0;
    let slots = (groups.len() * SLOTS) as u32;
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let caption =
        format!("Lock+unlock p50 under faults (ms, log scale; per-node timeout {timeout_ms} ms)");
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (0..slots).into_segmented(),
            (lo..hi).log_scale().with_key_points(key_points(lo, hi)),
        )?;
    let names: Vec<&str> = groups.iter().map(|g| g.0).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(slots as usize)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(k) if *k as usize % SLOTS == 1 => names
                .get(*k as usize / SLOTS)
                .copied()
                .unwrap_or("")
                .to_owned(),
            _ => String::new(),
        })
        .y_desc("p50 (ms)")
        .y_label_formatter(&|v| format!("{v}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    for who in ALL {
        let color = COLORS[who.index()];
        let bars = groups.iter().enumerate().filter_map(|(g, (_, v))| {
            let v = v[who.index()]?;
            let k = (g * SLOTS + who.index()) as u32;
            Some((k, v))
        });
        let bars: Vec<(u32, f64)> = bars.collect();
        chart
            .draw_series(bars.iter().map(|&(k, v)| {
                Rectangle::new(
                    [
                        (SegmentValue::Exact(k), lo),
                        (SegmentValue::Exact(k + 1), v),
                    ],
                    color.filled(),
                )
            }))?
            .label(who.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        chart.draw_series(bars.iter().map(|&(k, v)| {
            Text::new(
                label(v),
                (SegmentValue::Exact(k), v * 1.12),
                ("sans-serif", 11).into_font(),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// 1-2-5 steps of each decade within `lo..hi`, for log axes.
fn key_points(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

fn label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
