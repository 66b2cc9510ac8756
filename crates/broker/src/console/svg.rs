//! Line plots as inline SVG, drawn on the server: no plotting library in
//! the browser. Colours come from the stylesheet (`.s0`, `.s1`…).

use std::fmt::Write as _;

use super::history::{Point, WINDOW_MS};
use super::html::escape;

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 20.0;
const TOP: f64 = 8.0;

/// A plot of the last hour of `series` (label, points), ending at `now_ms`.
pub fn line_chart(title: &str, unit: &str, series: &[(&str, Vec<Point>)], now_ms: i64) -> String {
    let max = series.iter().flat_map(|(_, points)| points.iter().map(|(_, v)| *v)).fold(0.0, f64::max);
    let top = nice_ceiling(max);
    let mut svg = String::with_capacity(2048);
    let _ = write!(
        svg,
        r#"<figure class="plot"><figcaption>{}</figcaption><svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}">"#,
        escape(title),
        escape(title)
    );
    let plot_bottom = HEIGHT - BOTTOM;
    for (fraction, label) in [(0.0, "0".to_owned()), (0.5, human(top / 2.0)), (1.0, human(top))] {
        let y = plot_bottom - fraction * (plot_bottom - TOP);
        let _ = write!(
            svg,
            r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{WIDTH}" y2="{y:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{} {}</text>"#,
            LEFT - 4.0,
            y + 4.0,
            escape(&label),
            escape(unit)
        );
    }
    for (x_fraction, label) in [(0.0, "-60 min"), (0.5, "-30 min"), (1.0, "now")] {
        let x = LEFT + x_fraction * (WIDTH - LEFT);
        let anchor = if x_fraction == 1.0 { "end" } else { "middle" };
        let _ = write!(
            svg,
            r#"<text class="axis" x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{label}</text>"#,
            HEIGHT - 4.0
        );
    }
    for (index, (label, points)) in series.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<polyline class="s{}" points="{}"><title>{}</title></polyline>"#,
            index % 4,
            coordinates(points, top, now_ms),
            escape(label)
        );
        // The newest point, visible even while the line has one point only.
        if let Some((x, y)) = points.last().and_then(|point| position(*point, top, now_ms)) {
            let _ = write!(svg, r#"<circle class="s{}" cx="{x:.1}" cy="{y:.1}" r="2.5"/>"#, index % 4);
        }
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (index, (label, points)) in series.iter().enumerate() {
        let latest = points.last().map_or("-".to_owned(), |(_, v)| human(*v));
        let _ = write!(
            svg,
            r#"<span class="key s{}">{}: {} {}</span>"#,
            index % 4,
            escape(label),
            escape(&latest),
            escape(unit)
        );
    }
    svg.push_str("</div></figure>");
    svg
}

fn coordinates(points: &[Point], top: f64, now_ms: i64) -> String {
    let mut out = String::with_capacity(points.len() * 14);
    for (x, y) in points.iter().filter_map(|point| position(*point, top, now_ms)) {
        let _ = write!(out, "{x:.1},{y:.1} ");
    }
    out
}

/// Where a point lands in the plot; `None` when older than the window.
fn position((at, value): Point, top: f64, now_ms: i64) -> Option<(f64, f64)> {
    let start_ms = now_ms - WINDOW_MS as i64;
    if at < start_ms {
        return None;
    }
    let x = LEFT + (at - start_ms) as f64 / WINDOW_MS as f64 * (WIDTH - LEFT);
    let y = (HEIGHT - BOTTOM) - value / top * (HEIGHT - BOTTOM - TOP);
    Some((x, y))
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `value` (1 at least).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|c| *c >= value).unwrap_or(10.0 * power)
}

/// 1234567 as `1.2M`.
pub fn human(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    if scaled.fract() == 0.0 {
        format!("{scaled:.0}{suffix}")
    } else {
        format!("{scaled:.1}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_round_up_to_one_two_or_five() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(4000.0), 5000.0);
        assert_eq!(human(1_500_000.0), "1.5M");
        assert_eq!(human(12.0), "12");
    }

    #[test]
    fn a_chart_places_points_in_its_box_and_escapes_labels() {
        let now = 10_000_000;
        let svg = line_chart("<lag>", "rec", &[("g<1>", vec![(now - 1_800_000, 5.0), (now, 10.0)])], now);
        assert!(svg.contains("&lt;lag&gt;") && svg.contains("g&lt;1&gt;") && !svg.contains("<lag>"));
        // Half an hour ago is mid-plot; the maximum touches the top.
        let mid_x = LEFT + (WIDTH - LEFT) / 2.0;
        assert!(
            svg.contains(&format!("{mid_x:.1},{:.1} {WIDTH:.1},{TOP:.1}", (HEIGHT - BOTTOM + TOP) / 2.0)),
            "{svg}"
        );
    }
}
